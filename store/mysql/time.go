package mysql

import (
	"database/sql/driver"
	"fmt"
	"time"
)

// tsLayout is how the store writes times: UTC, to the microsecond, in the
// form MySQL converts to DATETIME(6) whatever the session's time zone.
const tsLayout = "2006-01-02 15:04:05.999999"

// formatTime renders t (any zone) as UTC DATETIME text. Years outside
// DATETIME's range 1000..9999 are clamped.
func formatTime(t time.Time) string {
	t = t.UTC()
	switch {
	case t.Year() < 1000:
		return "1000-01-01 00:00:00"
	case t.Year() > 9999:
		return "9999-12-31 23:59:59.999999"
	}
	return t.Format(tsLayout)
}

// nullTime scans a DATETIME column as UTC, whatever the connection's
// parseTime and loc settings: a time.Time is taken by its wall clock (the
// stored value), text is parsed. NULL leaves the zero time.
type nullTime struct{ Time time.Time }

// Scan implements sql.Scanner.
func (n *nullTime) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		n.Time = time.Time{}
		return nil
	case time.Time:
		n.Time = time.Date(v.Year(), v.Month(), v.Day(), v.Hour(), v.Minute(), v.Second(), v.Nanosecond(), time.UTC)
		return nil
	case []byte:
		return n.parse(string(v))
	case string:
		return n.parse(v)
	}
	return fmt.Errorf("outbox mysql: cannot scan %T as a time", src)
}

func (n *nullTime) parse(s string) error {
	if s == "" || s == "0000-00-00 00:00:00" || s == "0000-00-00 00:00:00.000000" {
		n.Time = time.Time{}
		return nil
	}
	t, err := time.ParseInLocation("2006-01-02 15:04:05.999999", s, time.UTC)
	if err != nil {
		return fmt.Errorf("outbox mysql: cannot read time %q: %w", s, err)
	}
	n.Time = t
	return nil
}

// Value implements driver.Valuer, so a nullTime can be passed back.
func (n nullTime) Value() (driver.Value, error) {
	if n.Time.IsZero() {
		return nil, nil
	}
	return formatTime(n.Time), nil
}

// micros renders d in whole microseconds, for INTERVAL arithmetic.
func micros(d time.Duration) int64 { return d.Microseconds() }
