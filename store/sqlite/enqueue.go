package sqlite

import (
	"context"
	"database/sql"
	"strings"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/compensation"
	"github.com/txoutbox/outbox/store/internal/keysql"
)

// maxRowsPerInsert keeps one INSERT well under SQLite's default limit of
// 32766 bind parameters (at most 9 per row).
const maxRowsPerInsert = 1000

// EnqueueLimits returns the limits Enqueue enforces.
func (s *Store) EnqueueLimits() outbox.Limits { return s.cfg.Limits }

// Enqueue validates events and inserts them in tx, the caller's transaction
// on the same database file. It is outbox.Enqueue(ctx, s, tx, events...).
//
// Open the application's *sql.DB with [DSN] so that tx holds the write lock
// from BEGIN (_txlock=immediate): SQLite has one writer at a time, so ids,
// assigned at insert, follow commit order, and the relay never sees a later
// event of an aggregate before an earlier one commits.
func (s *Store) Enqueue(ctx context.Context, tx *sql.Tx, events ...outbox.Event) ([]outbox.EventID, error) {
	return outbox.Enqueue[*sql.Tx](ctx, s, tx, events...)
}

// WriteEvents implements outbox.Writer for *sql.Tx. Use Enqueue instead.
func (s *Store) WriteEvents(ctx context.Context, tx *sql.Tx, events []outbox.Event) error {
	if tx == nil {
		return store.ErrNilTx
	}
	events, err := backend.SealPayloads(ctx, s.cfg.Encryption, s.keys(keysql.SQL(tx)), events)
	if err != nil {
		return err
	}
	for start := 0; start < len(events); start += maxRowsPerInsert {
		end := min(start+maxRowsPerInsert, len(events))
		query, args, err := s.insertStatement(events[start:end])
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, query, args...); err != nil {
			return s.wrap("enqueue", err)
		}
	}
	return nil
}

// insertStatement builds one multi-row INSERT. Expiry and delay given as
// durations are added to the database clock ('now' is one value for the
// whole statement); absolute times are converted to the stored UTC text.
func (s *Store) insertStatement(events []outbox.Event) (string, []any, error) {
	var b strings.Builder
	args := make([]any, 0, len(events)*8)
	b.WriteString(s.q.enqueueHead)
	for i := range events {
		e := &events[i]
		headers, err := backend.EncodeHeaders(i, e.Headers)
		if err != nil {
			return "", nil, err
		}
		onExpired, err := compensation.EncodeOnExpired(i, e.OnExpired)
		if err != nil {
			return "", nil, err
		}
		if i > 0 {
			b.WriteByte(',')
		}
		// The payload is bound as text: SQLite would take a []byte as a
		// BLOB, which json_valid reads as JSONB.
		b.WriteString("(?,?,?,?,?,?,?,")
		args = append(args, e.ID.String(), e.AggregateType, e.AggregateID, e.EventType, string(e.Payload), headers, onExpired)
		switch {
		case !e.ExpiresAt.IsZero():
			b.WriteString("?,")
			args = append(args, formatTime(e.ExpiresAt))
		case e.TTL > 0:
			b.WriteString("strftime(" + tsSQL + ", 'now', ?),")
			args = append(args, modifier(e.TTL))
		default:
			b.WriteString("NULL,")
		}
		switch {
		case !e.AvailableAt.IsZero():
			b.WriteString("?)")
			args = append(args, formatTime(e.AvailableAt))
		case e.Delay > 0:
			b.WriteString("strftime(" + tsSQL + ", 'now', ?))")
			args = append(args, modifier(e.Delay))
		default:
			b.WriteString("strftime(" + tsSQL + ", 'now'))")
		}
	}
	return b.String(), args, nil
}

var _ outbox.ContextHeaders = (*Store)(nil)

// ContextHeaders implements outbox.ContextHeaders with Config.ContextHeaders.
func (s *Store) ContextHeaders(ctx context.Context, headers map[string]string) {
	if s.cfg.ContextHeaders != nil {
		s.cfg.ContextHeaders(ctx, headers)
	}
}
