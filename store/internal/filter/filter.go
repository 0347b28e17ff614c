// Package filter writes the WHERE conditions of the store's filters
// (store.ListFilter, store.RequeueFilter) for a backend's SQL, with their
// arguments in order. The backends share it; it is no part of the store's
// public API.
package filter

import (
	"strings"
	"time"

	"github.com/txoutbox/outbox/store"
)

// List renders the conditions of f (Status, AggregateType, AggregateID,
// BeforeID) as " WHERE a AND b ...", or "" when it sets none, and returns
// their arguments in order. mark renders the placeholder of the n-th
// argument, counted from 1 ("$n" on PostgreSQL); nil means "?".
func List(f store.ListFilter, mark func(n int) string) (string, []any) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		m := "?"
		if mark != nil {
			m = mark(len(args))
		}
		where = append(where, cond+m)
	}
	if f.Status != "" {
		add("status = ", string(f.Status))
	}
	if f.AggregateType != "" {
		add("aggregate_type = ", f.AggregateType)
	}
	if f.AggregateID != "" {
		add("aggregate_id = ", f.AggregateID)
	}
	if f.BeforeID > 0 {
		add("id < ", f.BeforeID)
	}
	if len(where) == 0 {
		return "", args
	}
	return " WHERE " + strings.Join(where, " AND "), args
}

// SQL is how a backend writes a requeue filter's conditions.
type SQL struct {
	// Mark renders the placeholder of the n-th argument, from 1 ("$n" on
	// PostgreSQL); nil means "?".
	Mark func(n int) string
	// Like renders a case-insensitive LIKE of column against placeholder.
	Like func(column, placeholder string) string
	// Time converts a bound to the argument the backend compares
	// processed_at with; nil passes the time.Time.
	Time func(time.Time) any
}

// Requeue renders the conditions of f, and "id > after" when after > 0,
// as "a AND b ..." (never empty: the status is required), with their
// arguments in order.
func Requeue(f store.RequeueFilter, d SQL, after int64) (string, []any) {
	var where []string
	var args []any
	mark := func(v any) string {
		args = append(args, v)
		if d.Mark == nil {
			return "?"
		}
		return d.Mark(len(args))
	}
	at := func(t time.Time) any {
		if d.Time == nil {
			return t
		}
		return d.Time(t)
	}
	where = append(where, "status = "+mark(string(f.Status)))
	if f.ErrorLike != "" {
		where = append(where, d.Like("last_error", mark(f.ErrorLike)))
	}
	if !f.Since.IsZero() {
		where = append(where, "processed_at >= "+mark(at(f.Since)))
	}
	if !f.Until.IsZero() {
		where = append(where, "processed_at < "+mark(at(f.Until)))
	}
	if f.AggregateType != "" {
		where = append(where, "aggregate_type = "+mark(f.AggregateType))
	}
	if after > 0 {
		where = append(where, "id > "+mark(after))
	}
	return strings.Join(where, " AND "), args
}

// Replay renders the conditions of a replay: the delivered (PROCESSED)
// events that match f, of the aggregate (aggType, aggID) when aggType is
// set, as "a AND b ...", with their arguments in order.
func Replay(f store.ReplayFilter, d SQL, aggType, aggID string) (string, []any) {
	var where []string
	var args []any
	mark := func(v any) string {
		args = append(args, v)
		if d.Mark == nil {
			return "?"
		}
		return d.Mark(len(args))
	}
	at := func(t time.Time) any {
		if d.Time == nil {
			return t
		}
		return d.Time(t)
	}
	if aggType != "" {
		where = append(where, "aggregate_type = "+mark(aggType), "aggregate_id = "+mark(aggID))
	} else {
		if f.AggregateType != "" {
			where = append(where, "aggregate_type = "+mark(f.AggregateType))
		}
		if f.AggregateID != "" {
			where = append(where, "aggregate_id = "+mark(f.AggregateID))
		}
	}
	where = append(where, "status = 'PROCESSED'")
	if f.EventType != "" {
		where = append(where, "event_type = "+mark(f.EventType))
	}
	if !f.Since.IsZero() {
		where = append(where, "processed_at >= "+mark(at(f.Since)))
	}
	if !f.Until.IsZero() {
		where = append(where, "processed_at < "+mark(at(f.Until)))
	}
	return strings.Join(where, " AND "), args
}
