// Package postgres is the PostgreSQL backend of the outbox (pgx v5): the
// schema migrations, Enqueue in a caller's pgx.Tx or *sql.Tx, and the
// [store.Store] the relay uses.
//
// Relays lease lanes (store/internal/lanes), so any number of them can run
// against one database; all lease and due-time arithmetic uses the
// database clock.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3/database"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/migrate"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/lanes"
)

//go:embed migrations/*.sql
var migrationsFS embed.FS

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
}

var (
	_ store.Store           = (*Store)(nil)
	_ store.Listener        = (*Store)(nil)
	_ store.EnqueueObserver = (*Store)(nil)
	_ store.LaneHolder      = (*Store)(nil)
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
	s.claimer = lanes.NewClaimer(claimBackend{s}, lanes.PostgreSQL, t, s.leaseTx)
	s.claimer.SetSafetyNet(log, 0)
	s.notify = &notifier{
		channel:  t.Outbox,
		debounce: cfg.NotifyDebounce,
		send: func(ctx context.Context) error {
			_, err := pool.Exec(ctx, "SELECT pg_notify($1, '')", t.Outbox)
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

// Features reports SKIP LOCKED and LISTEN/NOTIFY.
func (s *Store) Features() store.Features {
	return store.Features{SkipLocked: true, Notify: true, ClaimBehindOwn: true}
}

// Close closes the pool if Open created it.
func (s *Store) Close() error {
	if s.ownPool {
		s.pool.Close()
	}
	return nil
}

// migrationNames is what the migrations render with: the tables, and
// Online, set only when adoption renders migration 00001 to build the
// outbox table's indexes without blocking its writers (CREATE INDEX
// CONCURRENTLY, which runs outside a transaction).
type migrationNames struct {
	store.Tables
	Online bool
}

func (s *Store) migrator() (*migrate.Runner, func(), error) {
	db := stdlib.OpenDBFromPool(s.pool)
	r, err := migrate.NewFor(db, database.DialectPostgres, migrationsFS, "migrations", s.t, migrationNames{Tables: s.t})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return r, func() { db.Close() }, nil
}

// MigrateUp applies the pending migrations. It refuses a table of that
// name that outbox did not create (store.ErrForeignTable): see Adopt.
func (s *Store) MigrateUp(ctx context.Context) ([]int64, error) {
	if err := s.guardUp(ctx); err != nil {
		return nil, err
	}
	// An existing (adopted, or earlier) table's sequence first: the lanes'
	// cursors need its ids in order.
	if err := s.checkIDOrder(ctx, false); err != nil {
		return nil, s.wrap("migrate", err)
	}
	r, done, err := s.migrator()
	if err != nil {
		return nil, err
	}
	defer done()
	return r.Up(ctx)
}

// MigrateDown drops the outbox tables. On an adopted table it removes only
// what adoption added, and it never drops a table outbox did not create.
func (s *Store) MigrateDown(ctx context.Context) error {
	r, done, err := s.migrator()
	if err != nil {
		return err
	}
	defer done()
	return s.migrateDown(ctx, r)
}

// MigrationVersion returns the applied and latest versions.
func (s *Store) MigrationVersion(ctx context.Context) (int64, int64, error) {
	r, done, err := s.migrator()
	if err != nil {
		return 0, 0, err
	}
	defer done()
	return r.Version(ctx)
}

// sqlstateUndefinedTable is PostgreSQL's "relation does not exist".
const sqlstateUndefinedTable = "42P01"

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
