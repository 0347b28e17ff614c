package mysql_test

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/relay/relaytest"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/mysql"
	"github.com/txoutbox/outbox/store/storetest"
)

type myTx struct {
	tx *sql.Tx
	s  *mysql.Store
}

func (m myTx) Enqueue(ctx context.Context, events ...outbox.Event) ([]outbox.EventID, error) {
	return m.s.Enqueue(ctx, m.tx, events...)
}
func (m myTx) Commit(context.Context) error   { return m.tx.Commit() }
func (m myTx) Rollback(context.Context) error { return m.tx.Rollback() }

// openDB opens the application's *sql.DB the way the package recommends.
func openDB(t testing.TB) *sql.DB {
	t.Helper()
	c, err := mysql.NewConnector(testenv.MySQL.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	t.Cleanup(func() { db.Close() })
	return db
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newStore migrates a new table on db and drops it (with its migration
// table) when the test ends.
func newStore(t testing.TB, db *sql.DB, cfg mysql.Config) *mysql.Store {
	t.Helper()
	if cfg.Table == "" {
		cfg.Table = storetest.TableName("my")
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	s, err := mysql.New(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.MigrateUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if err := s.MigrateDown(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		// What MigrateDown keeps (the migration versions), or left
		// behind after a failure.
		if err := storetest.DropMySQLTables(ctx, db, cfg.Table); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return s
}

func newHarness(t testing.TB) *storetest.Harness { return newHarnessOn(t, storetest.TableName("my")) }

// newHarnessOn is newHarness on the outbox table named table.
func newHarnessOn(t testing.TB, table string) *storetest.Harness {
	db := openDB(t)
	s := newStore(t, db, mysql.Config{Table: table})
	return &storetest.Harness{
		Store:            s,
		LoseClaimAnswers: s.LoseClaimAnswers,
		Conflict:         isConflict,
		Begin: func(ctx context.Context) (storetest.Tx, error) {
			tx, err := db.BeginTx(ctx, nil)
			return myTx{tx, s}, err
		},
		NewStore: func(t *testing.T, limits outbox.Limits) store.Store {
			s2, err := mysql.New(db, mysql.Config{Table: s.Table(), Limits: limits})
			if err != nil {
				t.Fatal(err)
			}
			return s2
		},
		// Another table on the same database, for the fan-out's copies.
		NewTable: func(t *testing.T) *storetest.Harness { return newHarness(t) },
		Sealing: func(t *testing.T, ring *encrypt.Keyring) func(ctx context.Context) (storetest.Tx, error) {
			s2, err := mysql.New(db, mysql.Config{Table: s.Table(), Encryption: ring})
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context) (storetest.Tx, error) {
				tx, err := db.BeginTx(ctx, nil)
				return myTx{tx, s2}, err
			}
		},
		Scale: scale(),
		SQL:   db,
		Table: s.Table(),
		SetFinishedAt: func(t testing.TB, id outbox.EventID, at time.Time) {
			t.Helper()
			if _, err := db.ExecContext(context.Background(), "UPDATE `"+table+"` SET processed_at = ? WHERE event_id = ?",
				at.UTC().Format("2006-01-02 15:04:05.000000"), id.String()); err != nil {
				t.Fatalf("set the finish time of %s: %v", id, err)
			}
		},
		Promises: storetest.Capabilities{SkipLocked: true, ClaimBehindOwn: true, EnqueueObserver: true,
			GaugeLeaser: true, AdoptionReporter: true},
	}
}

func scale() float64 {
	if testenv.Short() {
		return 0.2
	}
	return 1
}

// TestConformance runs the Store conformance suite.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) *storetest.Harness { return newHarness(t) })
}

// TestRelayConformance runs the relay-over-store suite on the same harness.
func TestRelayConformance(t *testing.T) {
	t.Parallel()
	relaytest.Run(t, func(t *testing.T) *storetest.Harness { return newHarness(t) })
}
