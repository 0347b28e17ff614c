package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/mysql"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/sqlite"
)

// backend is an opened database: the relay's Store and a way to enqueue in
// one transaction of the backend's own driver.
type backend struct {
	store store.Store
	kind  string
	// enqueue writes events in one transaction and commits it.
	enqueue func(ctx context.Context, events []outbox.Event) ([]outbox.EventID, error)
	close   func()
}

const dsnForms = "postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db (or user:pass@tcp(host:3306)/db), sqlite:///abs/path.db or sqlite://relative.db"

func openBackend(ctx context.Context, dsn, table string, limits outbox.Limits, log *slog.Logger) (*backend, error) {
	return openBackendSealing(ctx, dsn, table, limits, log, nil)
}

// openBackendSealing is openBackend whose enqueue seals payloads with ring
// (nil: in plain).
func openBackendSealing(ctx context.Context, dsn, table string, limits outbox.Limits, log *slog.Logger, ring *encrypt.Keyring) (*backend, error) {
	if dsn == "" {
		return nil, fmt.Errorf("no database given: pass --db or set OUTBOX_DB (%s)", dsnForms)
	}
	if _, err := store.TablesFor(table); err != nil {
		return nil, err
	}
	scheme := dsn
	if i := strings.Index(dsn, ":"); i >= 0 {
		scheme = dsn[:i]
	}
	if mysql.LooksLikeDSN(dsn) {
		scheme = "mysql" // also the driver's user:pass@tcp(host:port)/db form
	}
	switch strings.ToLower(scheme) {
	case "mysql", "mariadb":
		s, err := mysql.Open(ctx, dsn, mysql.Config{Table: table, Limits: limits, Logger: log, Encryption: ring})
		if err != nil {
			return nil, err
		}
		return &backend{
			store: s,
			kind:  "mysql",
			enqueue: func(ctx context.Context, events []outbox.Event) ([]outbox.EventID, error) {
				return inSQLTx(ctx, s.DB(), func(tx *sql.Tx) ([]outbox.EventID, error) { return s.Enqueue(ctx, tx, events...) })
			},
			close: func() { s.Close() },
		}, nil
	case "postgres", "postgresql":
		s, err := postgres.Open(ctx, dsn, postgres.Config{Table: table, Limits: limits, Logger: log, Encryption: ring})
		if err != nil {
			return nil, err
		}
		return &backend{
			store: s,
			kind:  "postgres",
			enqueue: func(ctx context.Context, events []outbox.Event) ([]outbox.EventID, error) {
				tx, err := s.Pool().Begin(ctx)
				if err != nil {
					return nil, fmt.Errorf("begin: %w", err)
				}
				defer tx.Rollback(ctx)
				ids, err := s.Enqueue(ctx, tx, events...)
				if err != nil {
					return nil, err
				}
				return ids, tx.Commit(ctx)
			},
			close: func() { s.Close() },
		}, nil
	case "sqlite", "file":
		s, err := sqlite.Open(ctx, dsn, sqlite.Config{Table: table, Limits: limits, Logger: log, Encryption: ring})
		if err != nil {
			return nil, err
		}
		return &backend{
			store: s,
			kind:  "sqlite",
			enqueue: func(ctx context.Context, events []outbox.Event) ([]outbox.EventID, error) {
				return inSQLTx(ctx, s.DB(), func(tx *sql.Tx) ([]outbox.EventID, error) { return s.Enqueue(ctx, tx, events...) })
			},
			close: func() { s.Close() },
		}, nil
	}
	return nil, fmt.Errorf("%w: unsupported database URL scheme %q: use %s", outbox.ErrInvalidConfig, scheme, dsnForms)
}

func inSQLTx(ctx context.Context, db *sql.DB, f func(*sql.Tx) ([]outbox.EventID, error)) ([]outbox.EventID, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	ids, err := f(tx)
	if err != nil {
		return nil, err
	}
	return ids, tx.Commit()
}
