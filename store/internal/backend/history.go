package backend

import (
	"fmt"
	"strings"
	"time"

	"github.com/txoutbox/outbox/store"
)

// HistoryMonth names one month of the history in the backends' SQL
// templates: Month is YYYYMM (the partition's or table's suffix), From and
// To bound it ('YYYY-MM-DD 00:00:00', UTC, To excluded).
type HistoryMonth struct {
	store.Tables
	Month, From, To string
}

// HistoryMonthOf returns the month that holds t, with t's tables.
func HistoryMonthOf(t store.Tables, at time.Time) HistoryMonth {
	start := store.MonthStart(at)
	return HistoryMonth{Tables: t, Month: start.Format("200601"),
		From: start.Format("2006-01-02 15:04:05"), To: start.AddDate(0, 1, 0).Format("2006-01-02 15:04:05")}
}

// ParseHistoryMonth reads a YYYYMM suffix back into its month.
func ParseHistoryMonth(t store.Tables, yyyymm string) (HistoryMonth, time.Time, error) {
	at, err := time.Parse("200601", yyyymm)
	if err != nil {
		return HistoryMonth{}, time.Time{}, fmt.Errorf("history month %q: %w", yyyymm, err)
	}
	return HistoryMonthOf(t, at), at, nil
}

// MonthsAhead returns the months the mover keeps ready beside those its
// rows need: this month and the next.
func MonthsAhead(t store.Tables, now time.Time) []HistoryMonth {
	return []HistoryMonth{HistoryMonthOf(t, now), HistoryMonthOf(t, store.MonthStart(now).AddDate(0, 1, 0))}
}

// MonthSuffix returns the YYYYMM suffix of a partition or table named
// prefix + YYYYMM, and whether name has that shape.
func MonthSuffix(name, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || len(rest) != 6 || strings.Trim(rest, "0123456789") != "" {
		return "", false
	}
	return rest, true
}
