package store

import "strings"

// Where renders the filter's conditions (Status, AggregateType, AggregateID,
// BeforeID) as " WHERE a AND b ...", or "" when it sets none, and returns
// their arguments in order. mark renders the placeholder of the n-th
// argument, counted from 1 ("$n" on PostgreSQL); nil means "?".
func (f ListFilter) Where(mark func(n int) string) (string, []any) {
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
