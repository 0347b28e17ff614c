package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/lanes"
)

// Config configures a Store. The zero value is valid.
type Config struct {
	// Table is the outbox table; default "outbox_events". The dead-letter,
	// attempts and migration tables are named after it.
	Table string
	// Limits bound what Enqueue accepts; zero fields mean the defaults.
	Limits outbox.Limits
	// NoAggregateLock turns off the transaction-scoped advisory locks that
	// Enqueue takes, per aggregate and in sorted order, before its INSERT.
	// Per-aggregate order does not depend on them: the outbox table's
	// trigger (migration 2) locks each row's aggregate for every producer,
	// Enqueue or plain SQL, and draws the row's id after that lock, so
	// that id order is commit order within an aggregate. The advisory
	// locks keep the rows of one Enqueue in the order given while two
	// Enqueue calls that name several aggregates still take their locks
	// in one order, and so cannot deadlock on the trigger's row locks.
	NoAggregateLock bool
	// NoNotify turns off the NOTIFY that Enqueue sends to wake relays.
	NoNotify bool
	// NotifyDebounce is the shortest gap between two NOTIFYs from this
	// Store's Enqueue calls (see notifier). Default 5ms.
	NotifyDebounce time.Duration
	// Logger receives the store's own warnings. Default slog.Default().
	Logger *slog.Logger
	// ContextHeaders, when set, adds headers from the caller's context to
	// every event Enqueue writes, e.g. tracing.InjectHeaders for the W3C
	// traceparent of the caller's span (see outbox.ContextHeaders).
	ContextHeaders func(ctx context.Context, headers map[string]string)
	// Encryption, when set, seals every payload Enqueue writes with its
	// subject's data key (docs/ENCRYPTION.md), and makes the subject's key
	// in the producer's transaction when it has none. Nil writes payloads
	// in plain, as given.
	Encryption *encrypt.Keyring
}

// Store is the PostgreSQL outbox. It is safe for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	ownPool bool
	cfg     Config
	t       store.Tables
	log     *slog.Logger
	q       queries
	notify  *notifier
	claimer *lanes.Claimer
	analyze analyzer
	// historyParts holds the months whose history partitions this store
	// created or found (admin_history.go).
	historyParts sync.Map
}

var (
	_ store.Store           = (*Store)(nil)
	_ store.Listener        = (*Store)(nil)
	_ store.EnqueueObserver = (*Store)(nil)
	_ store.CursorGuard     = (*Store)(nil)
)

// New returns a Store on pool. The pool stays the caller's: Close does not
// close it.
func New(pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: postgres.New needs a *pgxpool.Pool", outbox.ErrInvalidConfig)
	}
	t, limits, log, err := backend.ResolveConfig(cfg.Table, cfg.Limits, cfg.Logger)
	if err != nil {
		return nil, err
	}
	cfg.Table, cfg.Limits = t.Outbox, limits
	if cfg.NotifyDebounce < 0 {
		return nil, fmt.Errorf("%w: notify debounce must not be negative", outbox.ErrInvalidConfig)
	}
	if cfg.NotifyDebounce == 0 {
		cfg.NotifyDebounce = DefaultNotifyDebounce
	}
	s := &Store{pool: pool, cfg: cfg, t: t, log: log, q: buildQueries(t)}
	s.claimer = lanes.NewClaimer(claimBackend{s}, sqlDialect, t, s.leaseTx)
	s.claimer.SetSafetyNet(log, 0)
	s.notify = &notifier{
		channel:  t.Outbox,
		debounce: cfg.NotifyDebounce,
		send: func(ctx context.Context) error {
			_, err := pool.Exec(ctx, notifySQL, t.Outbox)
			return err
		},
	}
	return s, nil
}

// ConfigurePool sets what the relay's statements need of their sessions,
// where the DSN did not set it: plan_cache_mode force_custom_plan. The
// store's statements are prepared once per connection, and PostgreSQL
// would otherwise settle on a generic plan after five runs, made for the
// table as it was then: a new outbox table, analyzed while empty by
// `outbox migrate` or autovacuum, gets sequential scans that a backlog
// built in seconds makes ruinous (the relay fell behind 2,900 events/s in
// the benchmark's steady run, p99 latency 0.5 s), and keeps them until the
// next ANALYZE. A custom plan is made for the table's current size at
// each run, for a fraction of a millisecond.
//
// It also makes the pool close a connection whose statement failed
// because the session cannot write or is ending (SQLSTATE 25006 read-only,
// 57P01-57P03 shutdown, class 08 connection errors) rather than reuse it,
// so that after a failover the relay reconnects to the new primary by
// itself, and bounds each connection's lifetime (DefaultMaxConnLifetime)
// where the DSN did not set pool_max_conn_lifetime. Open applies it; pass
// a pool configured with it to New.
func ConfigurePool(pc *pgxpool.Config) {
	configureFailover(pc)
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	if _, ok := pc.ConnConfig.RuntimeParams["plan_cache_mode"]; !ok {
		pc.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	}
}

// Open connects to dsn (a postgres:// URL or a key=value string) and returns
// a Store that owns its pool (configured by ConfigurePool). Errors never
// contain the password.
func Open(ctx context.Context, dsn string, cfg Config) (*Store, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot parse the PostgreSQL DSN: %s", outbox.ErrInvalidConfig, redactParseError(err))
	}
	ConfigurePool(pc)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to PostgreSQL at %s:%d: %w", pc.ConnConfig.Host, pc.ConnConfig.Port, connectErrorOnce(err))
	}
	s, err := New(pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownPool = true
	return s, nil
}

func redactParseError(err error) string {
	// pgconn's ParseConfigError already masks the password; keep only the
	// reason in case a future version does not.
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 && strings.Contains(msg, "://") {
		return msg[i+2:]
	}
	return msg
}

// Pool returns the pool the store uses.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Table returns the outbox table name.
func (s *Store) Table() string { return s.t.Outbox }

// Tables returns the names of all the outbox's tables.
func (s *Store) Tables() store.Tables { return s.t }

// Features declares SKIP LOCKED, claims behind the relay's own batches in
// flight, LISTEN/NOTIFY, the in-process enqueue signal, the guard of the
// lanes' id cursors, the gauge lease and the adoption report.
func (s *Store) Features() store.Features {
	return store.Features{
		SkipLocked:       true,
		ClaimBehindOwn:   true,
		Listener:         s,
		EnqueueObserver:  s,
		CursorGuard:      s,
		GaugeLeaser:      s,
		AdoptionReporter: s,
	}
}

// Close closes the pool if Open created it.
func (s *Store) Close() error {
	if s.ownPool {
		s.pool.Close()
	}
	return nil
}

// wrap adds the operation to err and turns "relation does not exist" into
// advice.
func (s *Store) wrap(op string, err error) error {
	var missing string
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == sqlstateUndefinedTable {
		missing = fmt.Sprintf("table %q", s.t.Outbox)
	}
	return backend.WrapError(op, err, missing)
}

// connectErrorOnce returns err with each distinct failure of a
// *pgconn.ConnectError said once. pgx tries an address twice under the
// default sslmode=prefer (with TLS, then without) and reports every try,
// so a refused connection read "connection refused" twice, word for word.
// The returned error still unwraps to err (errors.Is and errors.As see the
// driver's errors).
func connectErrorOnce(err error) error {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return err
	}
	joined, ok := ce.Unwrap().(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	tries := joined.Unwrap()
	var distinct []string
	seen := make(map[string]bool, len(tries))
	for _, e := range tries {
		if s := e.Error(); !seen[s] {
			seen[s] = true
			distinct = append(distinct, s)
		}
	}
	if len(distinct) == len(tries) {
		return err
	}
	once := "failed to connect to `user=" + ce.Config.User + " database=" + ce.Config.Database + "`: " + strings.Join(distinct, "; ")
	return &onceError{msg: strings.Replace(err.Error(), ce.Error(), once, 1), err: err}
}

// onceError is an error with a rewritten message that unwraps to the
// original.
type onceError struct {
	msg string
	err error
}

func (e *onceError) Error() string { return e.msg }

func (e *onceError) Unwrap() error { return e.err }

// refusedData marks the errors PostgreSQL gives for the values of a write
// (SQLSTATE class 22 data exception, class 54 program limit exceeded, and
// the constraints on a row's own values: 23502 not null, 23514 check)
// with store.ErrRefused: retrying them cannot succeed. Every other error
// is the database's, not the data's (a read-only server 25006, a shutdown
// 57P01, a lost connection 08xxx, a unique or foreign key conflict with
// another row): the relay retries those and never ends an event FAILED
// for them.
func refusedData(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) != 5 {
		return err
	}
	switch {
	case pe.Code[:2] == "22", pe.Code[:2] == "54", pe.Code == "23502", pe.Code == "23514":
		return backend.Refused(err)
	}
	return err
}
