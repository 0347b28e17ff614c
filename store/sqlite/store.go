package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/lanes"
)

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
	// Encryption, when set, seals every payload Enqueue writes with its
	// subject's data key (docs/ENCRYPTION.md), and makes the subject's key
	// in the producer's transaction when it has none. Nil writes payloads
	// in plain, as given.
	Encryption *encrypt.Keyring
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
	s.claimer = lanes.NewClaimer(claimBackend{s}, sqlDialect, t, s.leaseTx)
	return s, nil
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

// Features declares none of the optional capabilities: SQLite has a
// single writer (no SKIP LOCKED), no LISTEN/NOTIFY, no lanes read from id
// cursors, no gauge lease (every process reads its own gauges) and no
// adoption.
func (s *Store) Features() store.Features {
	return store.Features{}
}

// Close closes the database if Open opened it.
func (s *Store) Close() error {
	if s.ownDB {
		return s.db.Close()
	}
	return nil
}

// wrap adds the operation to err and turns "no such table" into advice.
func (s *Store) wrap(op string, err error) error {
	var missing string
	if isGenericError(err, "no such table") {
		missing = fmt.Sprintf("table %q", s.t.Outbox)
	}
	return backend.WrapError(op, err, missing)
}

// string -> chan struct{}

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
