package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/txoutbox/outbox"
)

// Result says what Handle did with a message.
type Result int

const (
	// Processed: the event id was new; it is now recorded in the caller's
	// transaction and fn ran in it without error.
	Processed Result = iota + 1
	// Duplicate: the event id was already recorded (by a transaction that
	// committed); fn did not run.
	Duplicate
)

func (r Result) String() string {
	switch r {
	case Processed:
		return "processed"
	case Duplicate:
		return "duplicate"
	}
	return "none"
}

// Config configures an Inbox. The zero value is the default for every
// field.
type Config struct {
	// Dialect is the database's SQL. Zero: found from the *sql.DB's
	// driver (pgx, lib/pq, go-sql-driver/mysql, modernc.org/sqlite).
	Dialect Dialect
	// Table is the inbox table; default "inbox". Its companions are
	// <Table>_sequences and <Table>_schema_migrations. See ValidateTable.
	Table string
	// Retention is how long Cleanup keeps an event id; default
	// DefaultRetention (30 days). It must exceed the longest time after
	// which a producer may deliver an event again: see DefaultRetention.
	Retention time.Duration
	// SequenceRetention is how long Cleanup keeps the last sequence of an
	// aggregate that receives nothing. Zero keeps it for ever (one small
	// row per consumer and aggregate): an aggregate that is forgotten and
	// then receives its next event would be reported as a gap from 1.
	SequenceRetention time.Duration
	// CleanupBatch is the most rows one Cleanup statement deletes; default
	// 1000. Each page commits on its own, so that a large cleanup never
	// holds locks for long.
	CleanupBatch int
	// OnSequence is called, in the caller's goroutine and transaction, for
	// every gap and every reordering the inbox finds. It should be quick
	// (count, log, alert), and must not use the transaction. Nil: the
	// issue is only counted (Stats) and logged.
	OnSequence func(context.Context, SequenceIssue)
	// Logger logs sequence issues at WARN. Default slog.Default().
	Logger *slog.Logger
}

// DefaultRetention is how long an event id is kept by default: 30 days.
//
// An id must be kept for as long as the same event can arrive again. The
// relay redelivers by itself for well under an hour: at most 5 retries
// (--max-retries) with backoff capped at 5 minutes (--backoff-max), so 25
// minutes at the very most, plus a 2 minute lease (--lease) each time a
// relay dies mid-delivery, plus however long the relay holds delivery back
// while a sink is down. What reaches much further is an operator: a
// dead-lettered (FAILED) event may have been received already (the
// consumer committed, its answer was lost), and an operator may requeue it
// (outbox events retry) days later, after a weekend or an incident review.
// 30 days covers a month-end and an incident that waits for the next sprint, for a few
// dozen bytes per event. Choose less only if requeueing is forbidden after
// that long; choose more if a relay's retry settings are much longer.
const DefaultRetention = 30 * 24 * time.Hour

// DefaultCleanupBatch is the default Config.CleanupBatch.
const DefaultCleanupBatch = 1000

func (c *Config) withDefaults() {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.CleanupBatch == 0 {
		c.CleanupBatch = DefaultCleanupBatch
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: inbox: "+format, append([]any{outbox.ErrInvalidConfig}, args...)...)
	}
	if err := ValidateTable(c.Table); err != nil {
		return err
	}
	switch {
	case c.Dialect < DetectDialect || c.Dialect > SQLite:
		return bad("unknown Dialect %d: use inbox.PostgreSQL, inbox.MySQL or inbox.SQLite", int(c.Dialect))
	case c.Retention < 0:
		return bad("Retention %s is negative: use 0 for the default (%s)", c.Retention, DefaultRetention)
	case c.SequenceRetention < 0:
		return bad("SequenceRetention %s is negative: use 0 to keep sequences", c.SequenceRetention)
	case c.CleanupBatch < 0:
		return bad("CleanupBatch %d is negative: use 0 for the default (%d)", c.CleanupBatch, DefaultCleanupBatch)
	}
	return nil
}

// Inbox records the event ids each consumer has handled, in the
// consumer's own transactions, and checks aggregate sequences. It is safe
// for concurrent use; one Inbox serves any number of consumers (each
// names itself in Handle).
type Inbox struct {
	db     *sql.DB
	cfg    Config
	tables Tables
	q      queries
	stats  counters
}

// New returns an inbox on db, whose tables must have been created with
// MigrateUp. db is used by MigrateUp, Cleanup and the HTTP middleware;
// Handle works in the caller's transaction.
func New(db *sql.DB, cfg Config) (*Inbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: inbox.New needs the consumer's *sql.DB, got nil", outbox.ErrInvalidConfig)
	}
	cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Dialect == DetectDialect {
		d, err := detectDialect(db)
		if err != nil {
			return nil, err
		}
		cfg.Dialect = d
	}
	t, _ := TablesFor(cfg.Table) // validated above
	return &Inbox{db: db, cfg: cfg, tables: t, q: newQueries(cfg.Dialect, t)}, nil
}

// Tables returns the names of the inbox's tables.
func (ib *Inbox) Tables() Tables { return ib.tables }

// Dialect returns the inbox's SQL dialect.
func (ib *Inbox) Dialect() Dialect { return ib.cfg.Dialect }

// Handle runs fn exactly once per (consumer, eventID), in the caller's
// transaction tx: it records the pair in tx and then runs fn; for a pair
// already recorded it returns Duplicate without running fn. fn must do
// its work through tx (it is the same transaction), and the caller commits
// tx when Handle returns nil, or rolls it back otherwise: the record and
// fn's effects commit together or not at all, so a rolled-back message is
// handled again when it is redelivered.
//
// When fn fails, Handle returns fn's error unchanged. An empty eventID
// gives an error matching ErrNoEventID and records nothing.
//
// Two transactions that handle the same event at once: the second waits
// for the first (on the row lock of the unique key on PostgreSQL and
// MySQL, on the database's write lock on SQLite), then reports Duplicate
// if the first committed, or runs fn if it rolled back. See the package
// documentation for isolation levels and lock timeouts.
func (ib *Inbox) Handle(ctx context.Context, tx *sql.Tx, consumer, eventID string, fn func(context.Context) error) (Result, error) {
	return ib.HandleMessage(ctx, tx, consumer, Message{EventID: eventID}, fn)
}

// HandleMessage is Handle for a Message from one of the adapters
// (FromRequest, inboxkafka.FromRecord, ...): it also checks the
// message's aggregate sequence when it carries one.
func (ib *Inbox) HandleMessage(ctx context.Context, tx *sql.Tx, consumer string, m Message, fn func(context.Context) error) (Result, error) {
	if tx == nil {
		return 0, fmt.Errorf("%w: inbox.Handle needs the consumer's transaction, got nil", outbox.ErrInvalidConfig)
	}
	return ib.HandleIn(ctx, SQLQuerier(tx), consumer, m, fn)
}

// HandleIn is HandleMessage for a transaction of another type, adapted to
// a Querier (inboxpgx does this for pgx.Tx).
func (ib *Inbox) HandleIn(ctx context.Context, q Querier, consumer string, m Message, fn func(context.Context) error) (Result, error) {
	if err := checkConsumer(consumer); err != nil {
		return 0, err
	}
	if err := m.Validate(); err != nil {
		return 0, err
	}
	if fn == nil {
		return 0, fmt.Errorf("%w: inbox.Handle needs the function to run, got nil", outbox.ErrInvalidConfig)
	}
	n, err := q.Exec(ctx, ib.q.record, consumer, m.EventID)
	if err != nil {
		return 0, ib.wrap("record event "+m.EventID, err)
	}
	if n == 0 {
		ib.stats.duplicates.Add(1)
		return Duplicate, nil
	}
	if m.Seq > 0 {
		if err := ib.checkSequence(ctx, q, consumer, m); err != nil {
			return 0, err
		}
	}
	if err := fn(ctx); err != nil {
		ib.stats.failed.Add(1)
		return 0, err
	}
	ib.stats.processed.Add(1)
	return Processed, nil
}

// wrap adds what the inbox was doing to err, and turns a missing table
// into advice.
func (ib *Inbox) wrap(op string, err error) error {
	if ib.cfg.Dialect.isMissingTable(err) {
		return fmt.Errorf("%w: %s (table %q in %s): create the inbox tables first with (*inbox.Inbox).MigrateUp (or inboxpgx's MigrateUp): %v",
			ErrNotMigrated, op, ib.tables.Inbox, ib.cfg.Dialect, err)
	}
	return fmt.Errorf("inbox: %s: %w", op, err)
}

// Stats are an Inbox's counters since it was made, for all its consumers.
type Stats struct {
	// Processed counts fn runs that returned nil. A caller's transaction
	// that then failed to commit is counted here too.
	Processed int64
	// Failed counts fn runs that returned an error (for the middleware:
	// also the responses it rolled back, 5xx, 408 and 429).
	Failed int64
	// Duplicates counts messages whose id was already recorded: deliveries
	// that would have been handled twice without the inbox.
	Duplicates int64
	// Gaps and Reorders count sequence issues (see SequenceIssue).
	Gaps     int64
	Reorders int64
}

type counters struct {
	processed, failed, duplicates, gaps, reorders atomic.Int64
}

// Stats returns the inbox's counters.
func (ib *Inbox) Stats() Stats {
	return Stats{
		Processed:  ib.stats.processed.Load(),
		Failed:     ib.stats.failed.Load(),
		Duplicates: ib.stats.duplicates.Load(),
		Gaps:       ib.stats.gaps.Load(),
		Reorders:   ib.stats.reorders.Load(),
	}
}

// Querier is what the inbox needs of a caller's transaction: statements
// with positional arguments. SQLQuerier adapts a *sql.Tx; inboxpgx adapts
// a pgx.Tx.
type Querier interface {
	// Exec runs a statement and returns the number of rows it affected.
	Exec(ctx context.Context, query string, args ...any) (rowsAffected int64, err error)
	// QueryRow runs a query that returns at most one row.
	QueryRow(ctx context.Context, query string, args ...any) Row
}

// Row is one result row, as *sql.Row and pgx.Row are.
type Row interface {
	Scan(dest ...any) error
}

// SQLQuerier adapts a database/sql transaction to Querier.
func SQLQuerier(tx *sql.Tx) Querier { return sqlQuerier{tx} }

type sqlQuerier struct{ tx *sql.Tx }

func (s sqlQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s sqlQuerier) QueryRow(ctx context.Context, query string, args ...any) Row {
	return s.tx.QueryRowContext(ctx, query, args...)
}

// isNoRows reports whether a Row found no row, for both database/sql and
// pgx (whose ErrNoRows matches sql.ErrNoRows).
func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }
