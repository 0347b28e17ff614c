// Package sqladmin implements store.AdminQueries once over database/sql
// for the three backends; each backend supplies its dialect.Dialect
// (placeholders, quoting, the database clock, how times are stored) and
// its Schema.
package sqladmin

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/runes"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/dialect"
)

// Schema is what the admin queries need of a backend's tables beyond its
// dialect.
type Schema struct {
	// DeliveredOnRow: the backend records a successful delivery on the
	// event row (delivered_finished_at) rather than as an attempt row, so
	// the throughput counts those too. Its statement then takes the
	// interval twice (placeholders 1 and 2).
	DeliveredOnRow bool
	// Claimed is a condition, with %[1]s for a row's id column, that holds
	// when a claim in flight holds the row (the claims table of the
	// lanes): a PENDING row it holds reads PROCESSING. Empty: the status
	// column says PROCESSING itself. The backend's named statement
	// admin.claimed.
	Claimed string
	// Held is written before a condition on the FAILED or BLOCKED status,
	// to read an index of those rows (PostgreSQL's admin.held, "hold = 2
	// AND ").
	Held string
	// Deliveries, when set, is the table of delivery records per batch
	// (PostgreSQL): the throughput counts its deliveries rather than the
	// rows' (DeliveredOnRow is then off).
	Deliveries string
}

// Queries implements store.AdminQueries on db.
type Queries struct {
	db *sql.DB
	d  dialect.Dialect
	s  Schema
	// n renders the statements with per-call fragments; sql holds the
	// others, rendered once.
	n   names
	sql rendered
	// own: Close closes db.
	own bool
}

var _ store.AdminQueries = (*Queries)(nil)

// New returns the admin queries of the outbox tables t on db.
func New(db *sql.DB, d dialect.Dialect, s Schema, t store.Tables) *Queries {
	n := names{d: d, s: s, Q: d.Quote, Outbox: t.Outbox, Relays: backend.RelaysTable(t), Attempts: t.Attempts,
		Now: d.Now, DeliveredOnRow: s.DeliveredOnRow, Integer: d.Integer, Held: s.Held,
		Deliveries: s.Deliveries}
	if n.Integer == "" {
		n.Integer = "BIGINT"
	}
	return &Queries{db: db, d: d, s: s, n: n, sql: render(n)}
}

// NewOwned is New for a db the queries own: Close closes it.
func NewOwned(db *sql.DB, d dialect.Dialect, s Schema, t store.Tables) *Queries {
	q := New(db, d, s, t)
	q.own = true
	return q
}

// Close implements store.AdminQueries.
func (q *Queries) Close() error {
	if q.own {
		return q.db.Close()
	}
	return nil
}

// args collects arguments and renders their placeholders.
type args struct {
	d    dialect.Dialect
	vals []any
}

func (a *args) add(v any) string {
	a.vals = append(a.vals, v)
	return a.d.P(len(a.vals))
}

// likeEscape escapes LIKE's pattern characters with '!'.
func likeEscape(s string) string {
	return strings.NewReplacer("!", "!!", "%", "!%", "_", "!_").Replace(s)
}

func (q *Queries) where(a *args, f store.EventQuery, prefix string) []string {
	var w []string
	col := func(c string) string { return prefix + c }
	if len(f.Statuses) > 0 {
		w = append(w, q.statusIn(a, f.Statuses, prefix))
	}
	if f.AggregateType != "" {
		w = append(w, col("aggregate_type")+" = "+a.add(f.AggregateType))
	}
	if f.AggregateID != "" {
		w = append(w, col("aggregate_id")+" = "+a.add(f.AggregateID))
	}
	if f.EventType != "" {
		w = append(w, col("event_type")+" = "+a.add(f.EventType))
	}
	if !f.CreatedAfter.IsZero() {
		w = append(w, col("created_at")+" >= "+a.add(q.d.TimeArg(f.CreatedAfter)))
	}
	if !f.CreatedBefore.IsZero() {
		w = append(w, col("created_at")+" < "+a.add(q.d.TimeArg(f.CreatedBefore)))
	}
	if f.ErrorContains != "" {
		w = append(w, col("last_error")+" LIKE "+a.add("%"+likeEscape(f.ErrorContains)+"%")+" ESCAPE '!'")
	}
	if f.BeforeID > 0 {
		w = append(w, col("id")+" < "+a.add(f.BeforeID))
	}
	return w
}

// statusIn is the condition that a row's status (PROCESSING when a claim
// holds a PENDING row) is one of ss.
func (q *Queries) statusIn(a *args, ss []outbox.Status, prefix string) string {
	status := prefix + "status"
	if q.s.Claimed == "" {
		marks := make([]string, len(ss))
		for i, s := range ss {
			marks[i] = a.add(string(s))
		}
		return status + " IN (" + strings.Join(marks, ", ") + ")"
	}
	claimed := fmt.Sprintf(q.s.Claimed, prefix+"id")
	var any []string
	for _, s := range ss {
		switch s {
		case outbox.StatusPending:
			any = append(any, "("+status+" = 'PENDING' AND NOT "+claimed+")")
		case outbox.StatusProcessing:
			any = append(any, "("+status+" = 'PROCESSING' OR ("+status+" = 'PENDING' AND "+claimed+"))")
		default:
			any = append(any, status+" = "+a.add(string(s)))
		}
	}
	return "(" + strings.Join(any, " OR ") + ")"
}

func whereSQL(conds []string) string {
	if len(conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(conds, " AND ")
}

func scanSummary(rows *sql.Rows) (store.Record, error) {
	var (
		r                                      store.Record
		eventID, status                        string
		created, processed, available, expires timeValue
		lastError                              sql.NullString
	)
	if err := rows.Scan(&r.ID, &eventID, &r.AggregateType, &r.AggregateID, &r.EventType, &status, &r.RetryCount,
		&created, &processed, &available, &expires, &lastError); err != nil {
		return r, err
	}
	id, err := outbox.ParseEventID(eventID)
	if err != nil {
		return r, fmt.Errorf("row %d: %w", r.ID, err)
	}
	r.EventID, r.Status, r.LastError = id, outbox.Status(status), lastError.String
	r.CreatedAt, r.ProcessedAt, r.AvailableAt, r.ExpiresAt = created.t, processed.t, available.t, expires.t
	return r, nil
}

func (q *Queries) records(ctx context.Context, op, query string, vals []any) ([]store.Record, error) {
	rows, err := q.db.QueryContext(ctx, query, vals...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer rows.Close()
	var out []store.Record
	for rows.Next() {
		r, err := scanSummary(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}

// QueryEvents implements store.AdminQueries.
func (q *Queries) QueryEvents(ctx context.Context, f store.EventQuery) ([]store.Record, error) {
	f, err := f.Normalize()
	if err != nil {
		return nil, err
	}
	a := &args{d: q.d}
	w := whereSQL(q.where(a, f, ""))
	lim := a.add(f.Limit)
	return q.records(ctx, "query events", q.sql.events+w+` ORDER BY id DESC LIMIT `+lim, a.vals)
}

// MatchIDs implements store.AdminQueries.
func (q *Queries) MatchIDs(ctx context.Context, f store.EventQuery, afterID int64, limit int) ([]store.MatchedEvent, error) {
	f.BeforeID = 0
	a := &args{d: q.d}
	conds := q.where(a, f, "")
	conds = append(conds, "id > "+a.add(afterID))
	lim := a.add(limit)
	rows, err := q.db.QueryContext(ctx, q.sql.match+whereSQL(conds)+` ORDER BY id LIMIT `+lim, a.vals...)
	if err != nil {
		return nil, fmt.Errorf("match events: %w", err)
	}
	defer rows.Close()
	var out []store.MatchedEvent
	for rows.Next() {
		var m store.MatchedEvent
		var id, status string
		var exp timeValue
		if err := rows.Scan(&m.ID, &id, &status, &exp); err != nil {
			return nil, fmt.Errorf("match events: %w", err)
		}
		if m.EventID, err = outbox.ParseEventID(id); err != nil {
			return nil, fmt.Errorf("match events: %w", err)
		}
		m.Status, m.ExpiresAt = outbox.Status(status), exp.t
		out = append(out, m)
	}
	return out, rows.Err()
}

// CountBlockedBehind implements store.AdminQueries.
func (q *Queries) CountBlockedBehind(ctx context.Context, ids []int64) (blocked, past int64, err error) {
	if len(ids) == 0 {
		return 0, 0, nil
	}
	a := &args{d: q.d}
	marks := make([]string, len(ids))
	for i, id := range ids {
		marks[i] = a.add(id)
	}
	var p sql.NullInt64
	n := q.n
	n.IDs = strings.Join(marks, ", ")
	query, err := statements.RenderNamed("statements.blocked_behind", n)
	if err != nil {
		return 0, 0, fmt.Errorf("count blocked events: %w", err)
	}
	err = q.db.QueryRowContext(ctx, query, a.vals...).Scan(&blocked, &p)
	if err != nil {
		return 0, 0, fmt.Errorf("count blocked events: %w", err)
	}
	return blocked, p.Int64, nil
}

// FailedEvents implements store.AdminQueries.
func (q *Queries) FailedEvents(ctx context.Context, limit int) ([]store.Record, error) {
	return q.records(ctx, "failed events", q.sql.failed, []any{limit})
}

// BlockedChains implements store.AdminQueries.
func (q *Queries) BlockedChains(ctx context.Context, limit, chainLimit int) ([]store.BlockedChain, error) {
	heads, err := q.records(ctx, "blocked chains", q.sql.chainHeads, []any{limit})
	if err != nil {
		return nil, err
	}
	out := make([]store.BlockedChain, 0, len(heads))
	for _, h := range heads {
		c := store.BlockedChain{Head: h}
		vals := []any{h.AggregateType, h.AggregateID, h.ID}
		if err := q.db.QueryRowContext(ctx, q.sql.chainCount, vals...).Scan(&c.BlockedCount); err != nil {
			return nil, fmt.Errorf("blocked chains: %w", err)
		}
		if c.Blocked, err = q.records(ctx, "blocked chains", q.sql.chainEvents, append(vals, chainLimit)); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// Throughput implements store.AdminQueries.
func (q *Queries) Throughput(ctx context.Context, since time.Duration) ([]store.ThroughputBucket, error) {
	args := []any{since.Microseconds()}
	if q.s.DeliveredOnRow || q.s.Deliveries != "" {
		args = append(args, since.Microseconds())
	}
	rows, err := q.db.QueryContext(ctx, q.sql.throughput, args...)
	if err != nil {
		return nil, fmt.Errorf("throughput: %w", err)
	}
	defer rows.Close()
	var out []store.ThroughputBucket
	for rows.Next() {
		var b store.ThroughputBucket
		var minute timeValue
		var outcome string
		if err := rows.Scan(&minute, &outcome, &b.Count); err != nil {
			return nil, fmt.Errorf("throughput: %w", err)
		}
		b.Minute, b.Outcome = minute.t, store.OutcomeKind(outcome)
		out = append(out, b)
	}
	return out, rows.Err()
}

// PublishDurations implements store.AdminQueries.
func (q *Queries) PublishDurations(ctx context.Context, since time.Duration, limit int) ([]time.Duration, error) {
	if limit <= 0 {
		return nil, nil
	}
	args := []any{since.Microseconds(), limit}
	if q.s.DeliveredOnRow || q.s.Deliveries != "" {
		args = append(args, since.Microseconds(), limit, limit)
	}
	rows, err := q.db.QueryContext(ctx, q.sql.publishDurations, args...)
	if err != nil {
		return nil, fmt.Errorf("publish durations: %w", err)
	}
	defer rows.Close()
	out := make([]time.Duration, 0, min(limit, 1024))
	for rows.Next() {
		var started, finished timeValue
		var n int64
		if err := rows.Scan(&started, &finished, &n); err != nil {
			return nil, fmt.Errorf("publish durations: %w", err)
		}
		d := max(finished.t.Sub(started.t), 0)
		// A batch's publish time counts once per event of the batch.
		for ; n > 0 && len(out) < limit; n-- {
			out = append(out, d)
		}
	}
	return out, rows.Err()
}

// Relays implements store.AdminQueries.
func (q *Queries) Relays(ctx context.Context, within time.Duration) ([]store.RelayHeartbeat, error) {
	rows, err := q.db.QueryContext(ctx, q.sql.relays, within.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("relays: %w", err)
	}
	defer rows.Close()
	var out []store.RelayHeartbeat
	for rows.Next() {
		var h store.RelayHeartbeat
		var started, beat timeValue
		if err := rows.Scan(&h.RelayID, &h.Host, &started, &beat, &h.InFlight); err != nil {
			return nil, fmt.Errorf("relays: %w", err)
		}
		h.StartedAt, h.HeartbeatAt = started.t, beat.t
		out = append(out, h)
	}
	return out, rows.Err()
}

// Heartbeat implements store.AdminQueries.
func (q *Queries) Heartbeat(ctx context.Context, h store.RelayHeartbeat) error {
	if h.RelayID == "" {
		return fmt.Errorf("%w: a heartbeat needs a relay id", outbox.ErrInvalidConfig)
	}
	started := h.StartedAt
	if started.IsZero() {
		started = time.Now()
	}
	_, err := q.db.ExecContext(ctx, q.sql.heartbeat, runes.Truncate(h.RelayID, 200), runes.Truncate(h.Host, 200),
		q.d.TimeArg(started), h.InFlight)
	if err != nil {
		return fmt.Errorf("relay heartbeat: %w", err)
	}
	return nil
}

// RemoveRelay implements store.AdminQueries.
func (q *Queries) RemoveRelay(ctx context.Context, relayID string) error {
	_, err := q.db.ExecContext(ctx, q.sql.removeRelay, relayID)
	if err != nil {
		return fmt.Errorf("remove relay: %w", err)
	}
	return nil
}

// timeValue scans a stored time: a time.Time (PostgreSQL, MySQL with
// parseTime) or UTC text (SQLite); NULL is the zero time.
type timeValue struct{ t time.Time }

func (v *timeValue) Scan(src any) error {
	switch x := src.(type) {
	case nil:
		v.t = time.Time{}
	case time.Time:
		v.t = x
	case []byte:
		return v.parse(string(x))
	case string:
		return v.parse(x)
	default:
		return fmt.Errorf("cannot read a time from %T", src)
	}
	return nil
}

func (v *timeValue) parse(s string) error {
	t, err := time.ParseInLocation("2006-01-02 15:04:05", s, time.UTC)
	if err != nil {
		if t2, err2 := time.Parse(time.RFC3339Nano, s); err2 == nil {
			v.t = t2.UTC()
			return nil
		}
		return fmt.Errorf("cannot read timestamp %q: %w", s, err)
	}
	v.t = t
	return nil
}
