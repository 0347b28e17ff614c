package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/pressly/goose/v3/database"
	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/migrate"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/lanes"
	"github.com/txoutbox/outbox/store/internal/retry"
)

//go:embed migrations/*.sql
var migrationsFS embed.FS

// DriverName is the database/sql driver the store uses (modernc.org/sqlite,
// pure Go).
const DriverName = "sqlite"

// BusyTimeout is the busy_timeout [DSN] sets: how long a connection waits for
// the write lock before SQLITE_BUSY.
const BusyTimeout = 10 * time.Second

// Config configures a Store. The zero value is valid.
type Config struct {
	// Table is the outbox table; default "outbox_events". The dead-letter,
	// attempts and migration tables are named after it.
	Table string
	// Limits bound what Enqueue accepts; zero fields mean the defaults.
	Limits outbox.Limits
	// Logger receives the store's own warnings. Default slog.Default().
	Logger *slog.Logger
	// ContextHeaders, when set, adds headers from the caller's context to
	// every event Enqueue writes, e.g. tracing.InjectHeaders for the W3C
	// traceparent of the caller's span (see outbox.ContextHeaders).
	ContextHeaders func(ctx context.Context, headers map[string]string)
}

// Store is the SQLite outbox. It is safe for concurrent use, and several
// Stores (in one process or many) may share one database file.
type Store struct {
	db    *sql.DB
	ownDB bool
	cfg   Config
	t     store.Tables
	log   *slog.Logger
	q     queries
	// claimer claims in lanes (store/internal/lanes).
	claimer *lanes.Claimer

	gateOnce sync.Once
	gate     chan struct{}
}

var (
	_ store.Store            = (*Store)(nil)
	_ outbox.Writer[*sql.Tx] = (*Store)(nil)
)

// New returns a Store on db, a database opened with the "sqlite" driver
// (modernc.org/sqlite). The database stays the caller's: Close does not close
// it.
//
// The store runs each of its writes as an explicit BEGIN IMMEDIATE
// transaction on a connection of its own, so it is correct whatever
// _txlock the DSN sets. For good behaviour under load, though, open db the
// way [DSN] recommends (WAL, busy_timeout, _txlock=immediate): without a
// busy timeout, writers that meet each other fail at once with SQLITE_BUSY
// (the store retries a few times, an application's transactions do not), and
// without WAL a reader blocks the writer.
func New(db *sql.DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: sqlite.New needs a *sql.DB opened with the %q driver", outbox.ErrInvalidConfig, DriverName)
	}
	t, limits, log, err := backend.ResolveConfig(cfg.Table, cfg.Limits, cfg.Logger)
	if err != nil {
		return nil, err
	}
	cfg.Table, cfg.Limits = t.Outbox, limits
	s := &Store{db: db, cfg: cfg, t: t, log: log, q: buildQueries(t)}
	s.claimer = lanes.NewClaimer(claimBackend{s}, lanes.SQLite, t, s.leaseTx)
	return s, nil
}

// DSN returns the modernc.org/sqlite data source name the store uses for a
// database file at path, and that applications should use for their own
// *sql.DB on the same file:
//
//	file:<path>?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_txlock=immediate
//
// WAL lets readers (the relay's polling, the dashboard) run beside the
// single writer; busy_timeout makes a writer wait for the write lock instead
// of failing; _txlock=immediate makes every db.BeginTx take the write lock
// at BEGIN, so that a transaction that reads and then writes never fails
// half-way with SQLITE_BUSY. Open it with sql.Open("sqlite", sqlite.DSN(path)).
func DSN(path string) string {
	return "file:" + escapeURIPath(path) +
		"?_pragma=busy_timeout(" + fmt.Sprint(BusyTimeout.Milliseconds()) + ")" +
		"&_pragma=journal_mode(WAL)" +
		"&_pragma=foreign_keys(1)" +
		"&_pragma=synchronous(NORMAL)" +
		"&_txlock=immediate"
}

// escapeURIPath escapes the characters that would end or alter the path of
// a SQLite file: URI.
func escapeURIPath(p string) string {
	return strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
}

// dsnForms lists the accepted DSN forms, for error messages.
const dsnForms = "use sqlite:///absolute/path.db, sqlite://relative/path.db or a plain file path"

// ParsePath returns the database file path of dsn: sqlite:///absolute/path.db,
// sqlite://relative/path.db, or a plain file path.
func ParsePath(dsn string) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: cannot use this DSN for SQLite (%s): %s", outbox.ErrInvalidConfig, why, dsnForms)
	}
	dsn = strings.TrimSpace(dsn)
	if dsn == "" {
		return "", bad("it is empty")
	}
	lower := strings.ToLower(dsn)
	var path string
	switch {
	case strings.HasPrefix(lower, "sqlite://"):
		rest := dsn[len("sqlite://"):]
		if strings.ContainsAny(rest, "?#") {
			return "", bad("query parameters are not accepted: the store sets its own pragmas")
		}
		p, err := url.PathUnescape(rest)
		if err != nil {
			return "", bad("the path is not validly %-escaped")
		}
		path = p
	case strings.HasPrefix(lower, "sqlite:"):
		if strings.Contains(lower, ":memory:") {
			return "", bad("in-memory databases are not supported: each connection would see its own empty database")
		}
		return "", bad("a sqlite: DSN starts with sqlite://")
	case strings.HasPrefix(lower, "file:"):
		return "", bad("file: URIs are not accepted")
	case strings.Contains(dsn, "://"):
		scheme := dsn[:strings.Index(dsn, "://")]
		return "", bad("scheme " + fmt.Sprintf("%q", scheme) + " is not SQLite")
	default:
		path = dsn
	}
	if path == "" || path == "/" {
		return "", bad("it names no file")
	}
	if strings.Contains(path, ":memory:") {
		return "", bad("in-memory databases are not supported: each connection would see its own empty database")
	}
	if strings.HasSuffix(path, "/") {
		return "", bad("the path names a directory")
	}
	return path, nil
}

// Open opens (creating it if needed) the SQLite database that dsn names,
// with the pragmas of [DSN], and returns a Store that owns it: Close closes
// it. dsn is sqlite:///absolute/path.db, sqlite://relative/path.db or a plain
// file path. Open does not create the tables: run MigrateUp (`outbox
// migrate`) first.
func Open(ctx context.Context, dsn string, cfg Config) (*Store, error) {
	path, err := ParsePath(dsn)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open(DriverName, DSN(path))
	if err != nil {
		return nil, fmt.Errorf("open SQLite database %s: %w", path, err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open SQLite database %s: %w", path, err)
	}
	s, err := New(db, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.ownDB = true
	return s, nil
}

// DB returns the database the store uses.
func (s *Store) DB() *sql.DB { return s.db }

// Table returns the outbox table name.
func (s *Store) Table() string { return s.t.Outbox }

// Tables returns the names of all the outbox's tables.
func (s *Store) Tables() store.Tables { return s.t }

// Features reports that SQLite has a single writer (no SKIP LOCKED) and no
// LISTEN/NOTIFY.
func (s *Store) Features() store.Features {
	return store.Features{SkipLocked: false, Notify: false}
}

// Close closes the database if Open opened it.
func (s *Store) Close() error {
	if s.ownDB {
		return s.db.Close()
	}
	return nil
}

func (s *Store) migrator() (*migrate.Runner, error) {
	return migrate.New(s.db, database.DialectSQLite3, migrationsFS, "migrations", s.t)
}

// MigrateUp applies the pending migrations. It refuses a table of that
// name that outbox did not create (store.ErrForeignTable).
func (s *Store) MigrateUp(ctx context.Context) ([]int64, error) {
	if err := s.guardUp(ctx); err != nil {
		return nil, err
	}
	r, err := s.migrator()
	if err != nil {
		return nil, err
	}
	var applied []int64
	err = retryBusy(ctx, func() error {
		v, err := r.Up(ctx)
		applied = append(applied, v...)
		return err
	})
	return applied, err
}

// MigrateDown drops the outbox tables; it never drops a table outbox did
// not create.
func (s *Store) MigrateDown(ctx context.Context) error {
	if err := s.guardDown(ctx); err != nil {
		return err
	}
	r, err := s.migrator()
	if err != nil {
		return err
	}
	return retryBusy(ctx, func() error { return r.Down(ctx) })
}

// MigrationVersion returns the applied and latest versions.
func (s *Store) MigrationVersion(ctx context.Context) (int64, int64, error) {
	r, err := s.migrator()
	if err != nil {
		return 0, 0, err
	}
	var cur, latest int64
	err = retryBusy(ctx, func() error {
		var err error
		cur, latest, err = r.Version(ctx)
		return err
	})
	return cur, latest, err
}

// wrap adds the operation to err and turns "no such table" into advice.
func (s *Store) wrap(op string, err error) error {
	var missing string
	if isGenericError(err, "no such table") {
		missing = fmt.Sprintf("table %q", s.t.Outbox)
	}
	return backend.WrapError(op, err, missing)
}

// Timestamps are UTC text in one fixed format, so that they sort as they
// compare; tsSQL is the same format for strftime.
const (
	tsLayout = "2006-01-02 15:04:05.000"
	tsSQL    = `'%Y-%m-%d %H:%M:%f'`
)

// formatTime renders t (any zone) in the stored format, in UTC, to the
// millisecond (truncated). Years outside 1..9999 are clamped so that the
// text still sorts.
func formatTime(t time.Time) string {
	t = t.UTC()
	switch {
	case t.Year() < 1:
		return "0001-01-01 00:00:00.000"
	case t.Year() > 9999:
		return "9999-12-31 23:59:59.999"
	}
	return t.Format(tsLayout)
}

// parseTime reads a stored timestamp as UTC.
func parseTime(s string) (time.Time, error) {
	t, err := time.ParseInLocation("2006-01-02 15:04:05", s, time.UTC)
	if err != nil {
		// Accept RFC 3339 too, for rows written by hand.
		if t2, err2 := time.Parse(time.RFC3339Nano, s); err2 == nil {
			return t2.UTC(), nil
		}
		return time.Time{}, fmt.Errorf("cannot read timestamp %q: %w", s, err)
	}
	return t, nil
}

// parseNullTime reads a nullable timestamp; NULL is the zero time.
func parseNullTime(s sql.NullString) (time.Time, error) {
	if !s.Valid || s.String == "" {
		return time.Time{}, nil
	}
	return parseTime(s.String)
}

// modifier renders d as a strftime modifier ("+1.500 seconds"), to the
// millisecond, for arithmetic on the database clock.
func modifier(d time.Duration) string {
	ms := d.Milliseconds()
	sign := "+"
	if ms < 0 {
		sign, ms = "-", -ms
	}
	return fmt.Sprintf("%s%d.%03d seconds", sign, ms/1000, ms%1000)
}

// isBusy reports whether err is SQLITE_BUSY or SQLITE_LOCKED (any extended
// code): another connection holds the lock, and trying again can help.
func isBusy(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return true
		}
	}
	return false
}

// isGenericError reports whether err is SQLite's generic SQLITE_ERROR with
// a message that contains reason. SQLite gives no finer result code for
// some failures ("no such table", "no transaction is active"); the
// primary code is checked first, so that only the engine's own errors are
// read this way.
func isGenericError(err error, reason string) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_ERROR && strings.Contains(se.Error(), reason)
}

// busyRetry is the policy of retryBusy.
var busyRetry = retry.Policy{
	Attempts:  10,
	First:     2 * time.Millisecond,
	Max:       250 * time.Millisecond,
	Jitter:    true,
	Retryable: isBusy,
}

// retryBusy runs f again when it fails with SQLITE_BUSY or SQLITE_LOCKED,
// with a growing, jittered delay, a few times. With busy_timeout set each
// attempt already waited for the lock; without it, the retries are the wait.
func retryBusy(ctx context.Context, f func() error) error {
	return busyRetry.Do(ctx, f)
}

// nowSQL reads the database clock once per transaction: every statement of
// the transaction then uses that one value, as PostgreSQL's now() does.
const nowSQL = `SELECT strftime(` + tsSQL + `, 'now')`

// writeTx runs f in one write transaction: an explicit BEGIN IMMEDIATE on a
// connection of its own, so that the write lock is taken up front whatever
// the DSN's _txlock says, and f never meets SQLITE_BUSY half-way. now is the
// database clock at the start. The whole transaction is retried when the
// lock cannot be had. f must not call back into the relay: the transaction
// holds SQLite's single write lock.
func (s *Store) writeTx(ctx context.Context, f func(c *sql.Conn, now string) error) error {
	gate := s.writerGate()
	return retryBusy(ctx, func() error {
		select {
		case gate <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { <-gate }()
		c, err := s.db.Conn(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		// The rollback is armed before BEGIN: a BEGIN that took effect but
		// reported an error (its context ended as it returned) must not
		// leave the connection in the pool inside a transaction, where the
		// next BEGIN on it fails with "cannot start a transaction within a
		// transaction".
		done := false
		defer func() {
			if !done {
				s.rollback(c)
			}
		}()
		if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return err
		}
		var now string
		if err := c.QueryRowContext(ctx, nowSQL).Scan(&now); err != nil {
			return err
		}
		if err := f(c, now); err != nil {
			return err
		}
		// The COMMIT is not cancelled with ctx: once the work is done, a
		// cancellation must not turn a commit into an ambiguous one.
		if _, err := c.ExecContext(context.WithoutCancel(ctx), "COMMIT"); err != nil {
			return err
		}
		done = true
		return nil
	})
}

// gates holds one writer gate per database file (or per *sql.DB when the
// file cannot be named), shared by every Store of the process.
var gates sync.Map // string -> chan struct{}

// writerGate returns the gate that queues this process's write transactions
// on the store's database file. SQLite lets one writer in at a time and
// makes the others poll for the lock with sleeps of up to 100ms, which is
// unfair: a relay that commits and begins again at once keeps the lock while
// the others sleep. The gate is a FIFO queue in Go instead (a channel of
// capacity 1, whose blocked senders are served in order), so the relays and
// sweepers of one process take turns and a waiting writer starts as soon as
// the previous one commits. Writers in other processes, and the
// application's own transactions, still meet through SQLite's busy handler.
func (s *Store) writerGate() chan struct{} {
	s.gateOnce.Do(func() {
		key := fmt.Sprintf("db:%p", s.db)
		ctx, cancel := context.WithTimeout(context.Background(), BusyTimeout)
		defer cancel()
		var file string
		if err := s.db.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&file); err == nil && file != "" {
			key = "file:" + file
		}
		g, _ := gates.LoadOrStore(key, make(chan struct{}, 1))
		s.gate = g.(chan struct{})
	})
	return s.gate
}

// rollback ends a failed transaction. If that fails for any reason but
// "no transaction is active" (SQLite rolls back by itself after some
// errors), the connection is discarded rather than returned to the pool
// inside a transaction that would hold the write lock.
func (s *Store) rollback(c *sql.Conn) {
	_, err := c.ExecContext(context.Background(), "ROLLBACK")
	if err == nil || isGenericError(err, "no transaction is active") {
		return
	}
	s.log.Warn("outbox sqlite: rollback failed; discarding the connection", "err", err)
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
}

// readTx runs f in one read transaction (a consistent snapshot under WAL).
func (s *Store) readTx(ctx context.Context, f func(c *sql.Conn, now string) error) error {
	return retryBusy(ctx, func() error {
		c, err := s.db.Conn(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		// The rollback is armed before BEGIN: a BEGIN that took effect but
		// reported an error (its context ended as it returned) must not
		// leave the connection in the pool inside a transaction, where the
		// next BEGIN on it fails with "cannot start a transaction within a
		// transaction".
		done := false
		defer func() {
			if !done {
				s.rollback(c)
			}
		}()
		if _, err := c.ExecContext(ctx, "BEGIN DEFERRED"); err != nil {
			return err
		}
		var now string
		if err := c.QueryRowContext(ctx, nowSQL).Scan(&now); err != nil {
			return err
		}
		if err := f(c, now); err != nil {
			return err
		}
		if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
			return err
		}
		done = true
		return nil
	})
}

// refusedData marks the errors SQLite gives for the values of a write (a
// string or blob too big, a type mismatch, a NOT NULL, CHECK or STRICT
// column type constraint on the row's own values) with store.ErrRefused:
// retrying them cannot succeed. Every other error is the database's, not the data's (a
// read-only file or database SQLITE_READONLY, a lock SQLITE_BUSY, a full
// disk, an I/O error, a conflict with another row): the relay retries
// those and never ends an event FAILED for them.
func refusedData(err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_NOTNULL, sqlite3.SQLITE_CONSTRAINT_CHECK, sqlite3.SQLITE_CONSTRAINT_DATATYPE:
		return backend.Refused(err)
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_MISMATCH:
		return backend.Refused(err)
	}
	return err
}
