package pages

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// ReplayPageSize is how many aggregates Replay reads at a time; each is
// then replayed in a transaction of its own.
const ReplayPageSize = 500

// Aggregate names one aggregate.
type Aggregate struct{ Type, ID string }

// ReplayBackend is what a backend gives Replay.
type ReplayBackend struct {
	// Aggregates returns up to limit aggregates, after the given one in
	// (type, id) order, that have events matching the filter.
	Aggregates func(ctx context.Context, after Aggregate, limit int) ([]Aggregate, error)
	// ReplayAggregate replays (or, in a dry run, counts) the matching
	// events of one aggregate in one transaction, as store.Store.Replay
	// describes, under action; held is non-nil when the aggregate was left
	// alone.
	ReplayAggregate func(ctx context.Context, agg Aggregate, action store.OperatorAction, dryRun bool) (n int64, held *store.HeldAggregate, err error)
}

// Replay is store.Store.Replay for backends: it walks the aggregates that
// have matching events and replays each with b.ReplayAggregate, with an
// audit reason that names the filter.
func Replay(ctx context.Context, req store.ReplayRequest, b ReplayBackend) (store.ReplayResult, error) {
	var res store.ReplayResult
	if err := req.Validate(); err != nil {
		return res, err
	}
	a := req.Action
	a.EventID = outbox.EventID{}
	a.Reason += "; replay (" + req.Filter.String() + ")"
	one := func(agg Aggregate) error {
		n, held, err := b.ReplayAggregate(ctx, agg, a, req.DryRun)
		if err != nil {
			return fmt.Errorf("replay: aggregate %s/%s (%d events replayed so far): %w", agg.Type, agg.ID, res.Events, err)
		}
		if held != nil {
			res.Held = append(res.Held, *held)
			return nil
		}
		if n > 0 {
			res.Events += n
			res.Aggregates++
		}
		return nil
	}
	if f := req.Filter; f.AggregateID != "" {
		return res, one(Aggregate{f.AggregateType, f.AggregateID})
	}
	var after Aggregate
	for {
		aggs, err := b.Aggregates(ctx, after, ReplayPageSize)
		if err != nil {
			return res, fmt.Errorf("replay: %w", err)
		}
		for _, agg := range aggs {
			if err := one(agg); err != nil {
				return res, err
			}
			after = agg
		}
		if len(aggs) < ReplayPageSize {
			return res, nil
		}
	}
}

// Querier reads in a transaction: a *sql.Tx or a *sql.Conn.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// ReplayRows reads, through q, the event ids of one aggregate's rows that a
// replay matches (rowsQuery with args, each row its id and event id, in id
// order), then the event that holds the aggregate back (heldQuery with the
// aggregate's type and id, a row of its event id and status; no row:
// none). It returns the ids, or held (with how many matched) when an event
// holds the aggregate back; both are empty when nothing matched.
func ReplayRows(ctx context.Context, q Querier, rowsQuery string, args []any, heldQuery string, agg Aggregate) ([]outbox.EventID, *store.HeldAggregate, error) {
	rows, err := q.QueryContext(ctx, rowsQuery, args...)
	if err != nil {
		return nil, nil, err
	}
	var ids []outbox.EventID
	for rows.Next() {
		var rowID int64
		var id string
		if err := rows.Scan(&rowID, &id); err != nil {
			rows.Close()
			return nil, nil, err
		}
		eid, err := outbox.ParseEventID(id)
		if err != nil {
			rows.Close()
			return nil, nil, err
		}
		ids = append(ids, eid)
	}
	if err := rows.Close(); err != nil {
		return nil, nil, err
	}
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return nil, nil, err
	}
	var heldBy, status string
	switch err := q.QueryRowContext(ctx, heldQuery, agg.Type, agg.ID).Scan(&heldBy, &status); {
	case err == nil:
		eid, err := outbox.ParseEventID(heldBy)
		if err != nil {
			return nil, nil, err
		}
		return nil, &store.HeldAggregate{AggregateType: agg.Type, AggregateID: agg.ID, EventID: eid,
			Status: outbox.Status(status), Matched: int64(len(ids))}, nil
	case !errors.Is(err, sql.ErrNoRows):
		return nil, nil, err
	}
	return ids, nil, nil
}
