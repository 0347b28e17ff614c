package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/lanes"
)

// Config configures a Store. The zero value is valid.
type Config struct {
	// Table is the outbox table; default "outbox_events". The dead-letter,
	// attempts, aggregate-lock and migration tables are named after it.
	Table string
	// Limits bound what Enqueue accepts; zero fields mean the defaults.
	Limits outbox.Limits
	// NoAggregateLock has no effect. Since migration 2 the outbox table's
	// trigger serializes the producers of an aggregate for every producer,
	// Enqueue or plain SQL (docs/PRODUCERS.md), so that id order is commit
	// order within an aggregate; Enqueue takes the same locks first.
	//
	// Deprecated: the database keeps the order itself.
	NoAggregateLock bool
	// Logger receives the store's own messages: each retried deadlock or
	// lock wait timeout at DEBUG, a conflict still failing after the
	// retries at WARN. Default slog.Default().
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

// Store is the MySQL/MariaDB outbox. It is safe for concurrent use.
type Store struct {
	db    *sql.DB
	ownDB bool
	cfg   Config
	t     store.Tables
	log   *slog.Logger
	q     queries
	// txOpts is nil when every connection of db already runs at READ
	// COMMITTED (opened with NewConnector); otherwise each of the store's
	// transactions asks for it.
	txOpts *sql.TxOptions
	// claimer claims in lanes (store/internal/lanes).
	claimer *lanes.Claimer

	deadlocks, lockWaits, gaveUp atomic.Int64

	// betweenReapReads, when set (by a test), runs between the sweeper's
	// read of the claims and its read of the lanes.
	betweenReapReads func()

	observers backend.EnqueueObservers
}

var (
	_ store.Store            = (*Store)(nil)
	_ store.EnqueueObserver  = (*Store)(nil)
	_ outbox.Writer[*sql.Tx] = (*Store)(nil)
)

// New returns a Store on db, a *sql.DB of go-sql-driver/mysql. The database
// stays the caller's: Close does not close it.
//
// Open db with [NewConnector] (sql.OpenDB(connector)), or at least with the
// settings of [ConfigureDSN]. The store itself does not depend on them for
// correctness (it writes and reads every time as UTC, and asks for READ
// COMMITTED on each of its transactions when db was not opened with
// NewConnector), but without interpolateParams each statement with
// arguments takes three round trips instead of one.
func New(db *sql.DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: mysql.New needs a *sql.DB opened with go-sql-driver/mysql", outbox.ErrInvalidConfig)
	}
	t, limits, log, err := backend.ResolveConfig(cfg.Table, cfg.Limits, cfg.Logger)
	if err != nil {
		return nil, err
	}
	cfg.Table, cfg.Limits = t.Outbox, limits
	s := &Store{db: db, cfg: cfg, t: t, log: log, q: buildQueries(t)}
	if !readCommittedDB(db) {
		s.txOpts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	s.claimer = lanes.NewClaimer(claimBackend{s}, sqlDialect, t, s.leaseTx)
	return s, nil
}

// Store connection pool defaults for Open.
const (
	maxOpenConns = 16
	// connMaxLifetime bounds how long a session lives: one pinned to a
	// server that is no longer the primary, and that no error gave away,
	// moves to the current one within this time.
	connMaxLifetime = 5 * time.Minute
	// lockWaitTimeout bounds how long one of the store's own statements
	// waits for a row lock (innodb_lock_wait_timeout, default 50s) before
	// it fails with error 1205 and is retried. The store's transactions are
	// short, so a long wait means something else holds rows.
	lockWaitTimeout = "10"
)

// Open connects to dsn (mysql://user:pass@host:port/db?params or the
// driver's user:pass@tcp(host:port)/db?params) with the settings of
// [NewConnector] and returns a Store that owns its *sql.DB: Close closes
// it. Its connections also set innodb_lock_wait_timeout to 10 seconds.
// Open checks the server version (MySQL 8.0+ or MariaDB 10.6+). Errors
// never contain the password.
func Open(ctx context.Context, dsn string, cfg Config) (*Store, error) {
	dc, err := ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if _, set := dc.Params["innodb_lock_wait_timeout"]; !set {
		dc.Params["innodb_lock_wait_timeout"] = lockWaitTimeout
	}
	connector, err := newReadCommittedConnector(dc)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(maxOpenConns)
	db.SetMaxIdleConns(maxOpenConns)
	db.SetConnMaxLifetime(connMaxLifetime)
	where := address(dc)
	if _, err := serverFlavor(ctx, db); err != nil {
		db.Close()
		if msg := redact(err.Error(), dc.Passwd); msg != err.Error() {
			return nil, fmt.Errorf("connect to MySQL at %s: %s", where, msg)
		}
		return nil, fmt.Errorf("connect to MySQL at %s: %w", where, err)
	}
	s, err := New(db, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.ownDB = true
	return s, nil
}

// flavor is the server family and version.
type flavor struct {
	mariaDB      bool
	major, minor int
	version      string
}

// serverFlavor reads and checks the server version.
func serverFlavor(ctx context.Context, db *sql.DB) (flavor, error) {
	var v string
	if err := db.QueryRowContext(ctx, stmt("store.version", store.Tables{})).Scan(&v); err != nil {
		return flavor{}, err
	}
	f := flavor{version: v, mariaDB: strings.Contains(strings.ToLower(v), "mariadb")}
	fmt.Sscanf(v, "%d.%d", &f.major, &f.minor)
	switch {
	case f.mariaDB && (f.major < 10 || f.major == 10 && f.minor < 6):
		return f, fmt.Errorf("server is MariaDB %s: the outbox needs MariaDB 10.6 or later (FOR UPDATE SKIP LOCKED)", v)
	case !f.mariaDB && f.major < 8:
		return f, fmt.Errorf("server is MySQL %s: the outbox needs MySQL 8.0 or later (FOR UPDATE SKIP LOCKED, CTEs, window functions)", v)
	}
	return f, nil
}

// DB returns the database the store uses.
func (s *Store) DB() *sql.DB { return s.db }

// Table returns the outbox table name.
func (s *Store) Table() string { return s.t.Outbox }

// Tables returns the names of the outbox's tables (the per-aggregate
// table is Tables().Outbox + "_aggregates").
func (s *Store) Tables() store.Tables { return s.t }

// Features declares SKIP LOCKED, claims behind the relay's own batches in
// flight, the in-process enqueue signal, the gauge lease and the adoption
// report. MySQL has no LISTEN/NOTIFY, so relays poll (and relays in the
// process that enqueues are nudged: see OnEnqueue).
func (s *Store) Features() store.Features {
	return store.Features{
		SkipLocked:       true,
		ClaimBehindOwn:   true,
		EnqueueObserver:  s,
		GaugeLeaser:      s,
		AdoptionReporter: s,
	}
}

// OnEnqueue implements store.EnqueueObserver: f runs after each successful
// Enqueue through this Store, before the producer commits (the source's
// hybrid path: a relay in the same process looks for the events at once).
func (s *Store) OnEnqueue(f func()) (remove func()) { return s.observers.Add(f) }

// Close closes the database if Open opened it.
func (s *Store) Close() error {
	if s.ownDB {
		return s.db.Close()
	}
	return nil
}

// RetryStats counts the lock conflicts the store met and retried.
type RetryStats struct {
	// Deadlocks (error 1213) retried.
	Deadlocks int64
	// LockWaitTimeouts (error 1205) retried.
	LockWaitTimeouts int64
	// GaveUp counts operations that still failed with a conflict after
	// every retry; their error was returned to the caller.
	GaveUp int64
}

// Retries returns the lock conflicts retried since the store was created.
// Deadlocks and lock wait timeouts between concurrent claims, completions,
// sweeps and producers are retried inside the store (the whole transaction
// again, with a growing, jittered delay) and never reported as event
// failures; each retry is counted here and logged at DEBUG.
func (s *Store) Retries() RetryStats {
	return RetryStats{Deadlocks: s.deadlocks.Load(), LockWaitTimeouts: s.lockWaits.Load(), GaveUp: s.gaveUp.Load()}
}

// MySQL error numbers the store handles.
const (
	errLockWaitTimeout = 1205
	errDeadlock        = 1213
	errNoSuchTable     = 1146
)

func mysqlErrorNumber(err error) uint16 {
	var me *mysqldrv.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// wrap adds the operation to err and turns "table doesn't exist" into
// advice.
func (s *Store) wrap(op string, err error) error {
	var missing string
	if mysqlErrorNumber(err) == errNoSuchTable {
		missing = fmt.Sprintf("table %q (or one of its companion tables)", s.t.Outbox)
	}
	return backend.WrapError(op, err, missing)
}

// refusedData marks the errors MySQL and MariaDB give for the data of a
// write (a string the column's character set cannot hold, a value too
// long or out of range, invalid JSON, a constraint) with store.ErrRefused:
// retrying them cannot succeed.
func refusedData(err error) error {
	switch mysqlErrorNumber(err) {
	case 1048, 1264, 1265, 1292, 1300, 1366, 1406, 3140, 3819, 4025:
		return backend.Refused(err)
	}
	return err
}
