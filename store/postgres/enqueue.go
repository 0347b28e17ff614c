package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/compensation"
)

// maxRowsPerInsert keeps one INSERT well under PostgreSQL's 65535 bind
// parameters (11 per row).
const maxRowsPerInsert = 1000

var _ outbox.Writer[pgx.Tx] = (*Store)(nil)

// EnqueueLimits returns the limits Enqueue enforces.
func (s *Store) EnqueueLimits() outbox.Limits { return s.cfg.Limits }

// Enqueue validates events and inserts them in tx. It is
// outbox.Enqueue(ctx, s, tx, events...).
func (s *Store) Enqueue(ctx context.Context, tx pgx.Tx, events ...outbox.Event) ([]outbox.EventID, error) {
	return outbox.Enqueue[pgx.Tx](ctx, s, tx, events...)
}

// WriteEvents implements outbox.Writer for pgx.Tx. Use Enqueue instead.
func (s *Store) WriteEvents(ctx context.Context, tx pgx.Tx, events []outbox.Event) error {
	if tx == nil {
		return store.ErrNilTx
	}
	events, err := backend.SealPayloads(ctx, s.cfg.Encryption, s.keys(tx), events)
	if err != nil {
		return err
	}
	err = s.writeChunks(events, func(query string, args []any) error {
		_, err := tx.Exec(ctx, query, args...)
		return err
	})
	return s.afterWrite(ctx, err, func(query string, args []any) error {
		_, err := tx.Exec(ctx, query, args...)
		return err
	})
}

// afterWrite wakes relays: a NOTIFY in the producer's transaction when the
// debounce allows (it fires at commit), and the in-process observers.
func (s *Store) afterWrite(ctx context.Context, err error, exec func(string, []any) error) error {
	if err != nil {
		return err
	}
	if !s.cfg.NoNotify && s.notify.claimInTx(ctx, time.Now()) {
		if err := exec(notifySQL, []any{s.t.Outbox}); err != nil {
			return s.wrap("enqueue: notify", err)
		}
	}
	s.notify.enqueued()
	return nil
}

// SQLWriter enqueues in a *sql.Tx opened by any PostgreSQL database/sql
// driver (pgx's stdlib, lib/pq).
type SQLWriter struct{ s *Store }

var _ outbox.Writer[*sql.Tx] = SQLWriter{}

// SQL returns the writer for *sql.Tx transactions.
func (s *Store) SQL() SQLWriter { return SQLWriter{s} }

// EnqueueLimits returns the limits Enqueue enforces.
func (w SQLWriter) EnqueueLimits() outbox.Limits { return w.s.cfg.Limits }

// Enqueue validates events and inserts them in tx.
func (w SQLWriter) Enqueue(ctx context.Context, tx *sql.Tx, events ...outbox.Event) ([]outbox.EventID, error) {
	return outbox.Enqueue[*sql.Tx](ctx, w, tx, events...)
}

// WriteEvents implements outbox.Writer for *sql.Tx. Use Enqueue instead.
func (w SQLWriter) WriteEvents(ctx context.Context, tx *sql.Tx, events []outbox.Event) error {
	if tx == nil {
		return store.ErrNilTx
	}
	events, err := backend.SealPayloads(ctx, w.s.cfg.Encryption, w.s.sqlKeys(tx), events)
	if err != nil {
		return err
	}
	exec := func(query string, args []any) error {
		_, err := tx.ExecContext(ctx, query, args...)
		return err
	}
	return w.s.afterWrite(ctx, w.s.writeChunks(events, exec), exec)
}

func (s *Store) writeChunks(events []outbox.Event, exec func(string, []any) error) error {
	for start := 0; start < len(events); start += maxRowsPerInsert {
		end := min(start+maxRowsPerInsert, len(events))
		query, args, err := s.insertStatement(events[start:end])
		if err != nil {
			return err
		}
		if err := exec(query, args); err != nil {
			return s.wrap("enqueue", err)
		}
	}
	return nil
}

// aggregateLocks render enqueue.lock_aggregates: Table and Keys are the
// placeholders of the outbox table's name and of the aggregates' keys.
type aggregateLocks struct {
	Table string
	Keys  []string
}

// insertStatement builds one multi-row INSERT. Expiry and delay given as
// durations are added to the database's now(); the optional per-aggregate
// advisory locks are taken, in a fixed order, before any row is written.
// The table's trigger then locks each row's aggregate row, numbers the
// event and draws its id (see Config.NoAggregateLock).
func (s *Store) insertStatement(events []outbox.Event) (string, []any, error) {
	var b strings.Builder
	args := make([]any, 0, len(events)*10+8)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if !s.cfg.NoAggregateLock {
		keys := make([]string, 0, len(events))
		seen := make(map[string]bool, len(events))
		for i := range events {
			k := events[i].AggregateType + "\x1f" + events[i].AggregateID
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		lock := aggregateLocks{Table: arg(s.t.Outbox), Keys: make([]string, len(keys))}
		for i, k := range keys {
			lock.Keys[i] = arg(k)
		}
		head, err := statements.RenderNamed("enqueue.lock_aggregates", lock)
		if err != nil {
			return "", nil, err
		}
		b.WriteString(head)
	}
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
		var expiresAt, availableAt, ttl, delay any
		if !e.ExpiresAt.IsZero() {
			expiresAt = e.ExpiresAt
		}
		if e.TTL > 0 {
			ttl = e.TTL.Microseconds()
		}
		if !e.AvailableAt.IsZero() {
			availableAt = e.AvailableAt
		}
		if e.Delay > 0 {
			delay = e.Delay.Microseconds()
		}
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "(%s::uuid,%s::text,%s::text,%s::text,%s::json,%s::json,%s::json,%s::timestamptz,%s::bigint,%s::timestamptz,%s::bigint)",
			arg(e.ID.String()), arg(e.AggregateType), arg(e.AggregateID), arg(e.EventType),
			arg(string(e.Payload)), arg(headers), arg(onExpired), arg(expiresAt), arg(ttl), arg(availableAt), arg(delay))
	}
	if s.cfg.NoAggregateLock {
		b.WriteString(s.q.enqueueTail)
	} else {
		b.WriteString(s.q.enqueueLockedTail)
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

var _ outbox.ContextHeaders = SQLWriter{}

// ContextHeaders implements outbox.ContextHeaders with Config.ContextHeaders.
func (w SQLWriter) ContextHeaders(ctx context.Context, headers map[string]string) {
	w.s.ContextHeaders(ctx, headers)
}
