package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// Limits of one INSERT: rows, and bytes of payload and headers, well under
// the server's max_allowed_packet (16 MiB by default on MariaDB, 64 MiB on
// MySQL 8).
const (
	maxRowsPerInsert  = 1000
	maxBytesPerInsert = 4 << 20
)

// lockBuckets is the number of rows of the aggregate-lock table (see the
// migration). It must not change without a migration that refills it.
const lockBuckets = 65536

// EnqueueLimits returns the limits Enqueue enforces.
func (s *Store) EnqueueLimits() outbox.Limits { return s.cfg.Limits }

// Enqueue validates events and inserts them in tx, the caller's transaction
// on the same database. It is outbox.Enqueue(ctx, s, tx, events...).
//
// Unless Config.NoAggregateLock, it first locks the events' aggregates (in
// a fixed order), so a concurrent transaction that enqueues for one of them
// waits at its Enqueue until tx ends. Enqueue as the last step of the
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
	if !s.cfg.NoAggregateLock {
		if err := s.lockAggregates(ctx, tx, events); err != nil {
			return err
		}
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

// bucket maps an aggregate to a row of the aggregate-lock table (FNV-1a).
func bucket(aggregateType, aggregateID string) int {
	h := fnv.New32a()
	h.Write([]byte(aggregateType))
	h.Write([]byte{0})
	h.Write([]byte(aggregateID))
	return int(h.Sum32() % lockBuckets)
}

// lockAggregates locks the lock-table rows of the events' aggregates in
// ascending order (one statement, a primary-key range scan), until tx ends.
func (s *Store) lockAggregates(ctx context.Context, tx *sql.Tx, events []outbox.Event) error {
	buckets := make([]int, 0, len(events))
	for i := range events {
		buckets = append(buckets, bucket(events[i].AggregateType, events[i].AggregateID))
	}
	slices.Sort(buckets)
	buckets = slices.Compact(buckets)
	var b strings.Builder
	b.WriteString("SELECT bucket FROM `" + s.locks + "` WHERE bucket IN (")
	for i, k := range buckets {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(k))
	}
	b.WriteString(") ORDER BY bucket FOR UPDATE")
	rows, err := tx.QueryContext(ctx, b.String())
	if err != nil {
		return s.wrap("enqueue: lock aggregates", err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return s.wrap("enqueue: lock aggregates", err)
	}
	if n != len(buckets) {
		return fmt.Errorf("enqueue: lock aggregates: table %s has %d of the %d rows it needs: run `outbox migrate` again", s.locks, n, len(buckets))
	}
	return nil
}

// insertStatement builds one multi-row INSERT. created_at and durations
// (TTL, delay) use the database clock: UTC_TIMESTAMP(6) is one value for
// the whole statement. Absolute times are written as UTC text.
func (s *Store) insertStatement(events []outbox.Event, offset int) (string, []any, error) {
	var b strings.Builder
	args := make([]any, 0, len(events)*8)
	b.WriteString("INSERT INTO `" + s.t.Outbox + "` (event_id, aggregate_type, aggregate_id, event_type, payload, headers, " +
		"on_expired, status, created_at, expires_at, available_at) VALUES ")
	for i := range events {
		e := &events[i]
		headers, err := store.EncodeHeaders(offset+i, e.Headers)
		if err != nil {
			return "", nil, err
		}
		onExpired, err := store.EncodeOnExpired(offset+i, e.OnExpired)
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
			b.WriteString("CAST(? AS DATETIME(6)))")
			args = append(args, formatTime(e.AvailableAt))
		case e.Delay > 0:
			b.WriteString("UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)")
			args = append(args, micros(e.Delay))
		default:
			b.WriteString("UTC_TIMESTAMP(6))")
		}
	}
	return b.String(), args, nil
}
