package sqlite

import (
	"database/sql"
	"fmt"
	"time"
)

// Timestamps are UTC text in one fixed format, so that they sort as they
// compare; tsSQL is the same format for strftime.
const (
	tsLayout = "2006-01-02 15:04:05.000"
	tsSQL    = `'%Y-%m-%d %H:%M:%f'`
)

// formatTime renders t (any zone) in the stored format, in UTC, to the
// millisecond (truncated). Years outside 1..9999 are clamped so that the
// text still sorts.
func formatTime(t time.Time) string {
	t = t.UTC()
	switch {
	case t.Year() < 1:
		return "0001-01-01 00:00:00.000"
	case t.Year() > 9999:
		return "9999-12-31 23:59:59.999"
	}
	return t.Format(tsLayout)
}

// parseTime reads a stored timestamp as UTC.
func parseTime(s string) (time.Time, error) {
	t, err := time.ParseInLocation("2006-01-02 15:04:05", s, time.UTC)
	if err != nil {
		// Accept RFC 3339 too, for rows written by hand.
		if t2, err2 := time.Parse(time.RFC3339Nano, s); err2 == nil {
			return t2.UTC(), nil
		}
		return time.Time{}, fmt.Errorf("cannot read timestamp %q: %w", s, err)
	}
	return t, nil
}

// parseNullTime reads a nullable timestamp; NULL is the zero time.
func parseNullTime(s sql.NullString) (time.Time, error) {
	if !s.Valid || s.String == "" {
		return time.Time{}, nil
	}
	return parseTime(s.String)
}

// modifier renders d as a strftime modifier ("+1.500 seconds"), to the
// millisecond, for arithmetic on the database clock.
func modifier(d time.Duration) string {
	ms := d.Milliseconds()
	sign := "+"
	if ms < 0 {
		sign, ms = "-", -ms
	}
	return fmt.Sprintf("%s%d.%03d seconds", sign, ms/1000, ms%1000)
}
