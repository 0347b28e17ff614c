package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/compensation"
	"github.com/txoutbox/outbox/store/internal/keysql"
)

// Limits of one INSERT: rows, and bytes of payload and headers, well under
// the server's max_allowed_packet (16 MiB by default on MariaDB, 64 MiB on
// MySQL 8).
const (
	maxRowsPerInsert  = 1000
	maxBytesPerInsert = 4 << 20
)

// EnqueueLimits returns the limits Enqueue enforces.
func (s *Store) EnqueueLimits() outbox.Limits { return s.cfg.Limits }

// Enqueue validates events and inserts them in tx, the caller's transaction
// on the same database. It is outbox.Enqueue(ctx, s, tx, events...).
//
// It first locks the events' aggregates (in a fixed order), so a concurrent
// transaction that enqueues for one of them, through Enqueue or plain SQL,
// waits until tx ends. Enqueue as the last step of the
// transaction, so that the lock is held only until the COMMIT, and call it
// once per transaction (several calls that name aggregates in different
// orders can deadlock with another transaction; MySQL then rolls one of them
// back with error 1213, which your code should retry as a whole).
func (s *Store) Enqueue(ctx context.Context, tx *sql.Tx, events ...outbox.Event) ([]outbox.EventID, error) {
	return outbox.Enqueue[*sql.Tx](ctx, s, tx, events...)
}

// WriteEvents implements outbox.Writer for *sql.Tx. Use Enqueue instead.
func (s *Store) WriteEvents(ctx context.Context, tx *sql.Tx, events []outbox.Event) error {
	if tx == nil {
		return store.ErrNilTx
	}
	if len(events) == 0 {
		return nil
	}
	for i := range events {
		if d := jsonDepth(events[i].Payload); d > maxJSONDepth {
			return &outbox.InvalidEventError{Index: i, Field: "payload", Reason: fmt.Sprintf(
				"nests arrays and objects %d levels deep; MariaDB's JSON_VALID refuses more than %d", d, maxJSONDepth)}
		}
		if c := events[i].OnExpired; c != nil {
			if d := jsonDepth(c.Payload); d > maxJSONDepth-1 {
				return &outbox.InvalidEventError{Index: i, Field: "on_expired", Reason: fmt.Sprintf(
					"payload nests arrays and objects %d levels deep; MariaDB's JSON_VALID refuses more than %d", d, maxJSONDepth-1)}
			}
		}
	}
	events, err := backend.SealPayloads(ctx, s.cfg.Encryption, s.keys(keysql.SQL(tx)), events)
	if err != nil {
		return err
	}
	if err := s.lockAggregates(ctx, tx, events); err != nil {
		return err
	}
	start := 0
	for start < len(events) {
		end, size := start, 0
		for end < len(events) && end-start < maxRowsPerInsert && (end == start || size < maxBytesPerInsert) {
			size += eventSize(&events[end])
			end++
		}
		query, args, err := s.insertStatement(events[start:end], start)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, query, args...); err != nil {
			return s.wrap("enqueue", err)
		}
		start = end
	}
	s.observers.Notify()
	return nil
}

// maxJSONDepth is the deepest nesting MariaDB's JSON_VALID accepts (MySQL
// accepts 100): deeper payloads would fail the column's CHECK at INSERT.
const maxJSONDepth = 31

// jsonDepth returns how deeply arrays and objects nest in valid JSON b.
func jsonDepth(b []byte) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

// eventSize estimates the bytes an event adds to an INSERT.
func eventSize(e *outbox.Event) int {
	n := len(e.Payload) + len(e.AggregateType) + len(e.AggregateID) + len(e.EventType) + 200
	if e.OnExpired != nil {
		n += len(e.OnExpired.Payload) + len(e.OnExpired.EventType) + 40
	}
	for k, v := range e.Headers {
		n += len(k) + len(v) + 8
	}
	return n
}

// lockAggregates locks the rows of the events' aggregates in the
// aggregates table (migration 2), in ascending order, in one statement,
// until tx ends: INSERT ... ON DUPLICATE KEY UPDATE locks a row that exists
// and creates (and locks) one that does not. The table's trigger takes the
// same locks row by row, for every producer; taking them all first matters
// for a multi-row INSERT, whose AUTO_INCREMENT ids InnoDB may draw at its
// first row (innodb_autoinc_lock_mode 1): every aggregate of the INSERT is
// then already held, so its ids follow every earlier commit of those
// aggregates. The sorted order keeps two Enqueue calls from deadlocking.
func (s *Store) lockAggregates(ctx context.Context, tx *sql.Tx, events []outbox.Event) error {
	keys := lockOrder(events)
	var b strings.Builder
	args := make([]any, 0, 2*len(keys))
	b.WriteString(s.q.lockAggregatesHead)
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,0)")
		args = append(args, k.typ, k.id)
	}
	b.WriteString(s.q.lockAggregatesTail)
	if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
		return s.wrap("enqueue: lock aggregates", err)
	}
	return nil
}

// lockOrder is the events' aggregates, each once, in the ascending
// (aggregate_type, aggregate_id) order in which lockAggregates locks them.
func lockOrder(events []outbox.Event) []aggKey {
	keys := make([]aggKey, 0, len(events))
	for i := range events {
		keys = append(keys, aggKey{events[i].AggregateType, events[i].AggregateID})
	}
	slices.SortFunc(keys, func(a, b aggKey) int {
		if c := strings.Compare(a.typ, b.typ); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	return slices.Compact(keys)
}

// insertStatement builds one multi-row INSERT. created_at and durations
// (TTL, delay) use the database clock: UTC_TIMESTAMP(6) is one value for
// the whole statement. Absolute times are written as UTC text, and
// aggregate_seq = 0 tells the table's trigger so (it moves the times of
// other producers from their session's time zone to UTC, and numbers the
// row, replacing the 0).
func (s *Store) insertStatement(events []outbox.Event, offset int) (string, []any, error) {
	var b strings.Builder
	args := make([]any, 0, len(events)*8)
	b.WriteString(s.q.enqueueHead)
	for i := range events {
		e := &events[i]
		headers, err := backend.EncodeHeaders(offset+i, e.Headers)
		if err != nil {
			return "", nil, err
		}
		onExpired, err := compensation.EncodeOnExpired(offset+i, e.OnExpired)
		if err != nil {
			return "", nil, err
		}
		if i > 0 {
			b.WriteByte(',')
		}
		// The payload is bound as a string: a []byte would be sent as a
		// binary string, which MySQL's JSON type refuses.
		b.WriteString("(?,?,?,?,?,?,?,'PENDING',UTC_TIMESTAMP(6),")
		args = append(args, e.ID.String(), e.AggregateType, e.AggregateID, e.EventType, string(e.Payload), headers, onExpired)
		switch {
		case !e.ExpiresAt.IsZero():
			b.WriteString("CAST(? AS DATETIME(6)),")
			args = append(args, formatTime(e.ExpiresAt))
		case e.TTL > 0:
			b.WriteString("UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,")
			args = append(args, micros(e.TTL))
		default:
			b.WriteString("NULL,")
		}
		switch {
		case !e.AvailableAt.IsZero():
			b.WriteString("CAST(? AS DATETIME(6)),0)")
			args = append(args, formatTime(e.AvailableAt))
		case e.Delay > 0:
			b.WriteString("UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,0)")
			args = append(args, micros(e.Delay))
		default:
			b.WriteString("UTC_TIMESTAMP(6),0)")
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
