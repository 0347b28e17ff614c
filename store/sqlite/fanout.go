package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
)

// fanoutNames render the fan-out's statements: the names of every
// statement and From, the source table of a copy (checked by
// backend.CopySource).
type fanoutNames struct {
	names
	From string
}

// CopyEvents implements store.Store. It writes the copies in one write
// transaction, as Enqueue's rows are written: one INSERT ... SELECT in
// source id order, whose rows the table's insert trigger numbers and puts
// in their aggregate's lane. SQLite tells no relay of new events (no
// Listener, no EnqueueObserver): the relays find the copies by polling.
func (s *Store) CopyEvents(ctx context.Context, from string, ids []int64) (int64, error) {
	if err := backend.CopySource(from, s.t.Outbox); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	insert, err := statements.RenderNamed("fanout.copy", fanoutNames{names: namesFor(s.t), From: from})
	if err != nil {
		return 0, err
	}
	idsJSON, err := json.Marshal(ids)
	if err != nil {
		return 0, err
	}
	var copied int64
	err = s.writeTx(ctx, func(c *sql.Conn, _ string) error {
		res, err := c.ExecContext(ctx, insert, string(idsJSON))
		if err != nil {
			return err
		}
		copied, err = res.RowsAffected()
		return err
	})
	if err != nil {
		var missing string
		if isGenericError(err, "no such table") {
			missing = backend.CopyMissing(from, s.t.Outbox)
		}
		return 0, backend.WrapError("copy events", err, missing)
	}
	return copied, nil
}

// EventTypes implements store.Store.
func (s *Store) EventTypes(ctx context.Context) ([]store.EventTypes, error) {
	rows, err := s.db.QueryContext(ctx, s.q.eventTypes)
	if err != nil {
		return nil, s.wrap("event types", err)
	}
	defer rows.Close()
	var out []store.EventTypes
	for rows.Next() {
		var e store.EventTypes
		if err := rows.Scan(&e.EventType, &e.AggregateType, &e.Count); err != nil {
			return nil, s.wrap("event types", err)
		}
		out = append(out, e)
	}
	return out, s.wrap("event types", rows.Err())
}
