package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/relay/relaytest"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/sqlite"
	"github.com/txoutbox/outbox/store/storetest"
)

type sqlTx struct {
	tx *sql.Tx
	s  *sqlite.Store
}

func (x sqlTx) Enqueue(ctx context.Context, events ...outbox.Event) ([]outbox.EventID, error) {
	return x.s.Enqueue(ctx, x.tx, events...)
}
func (x sqlTx) Commit(context.Context) error   { return x.tx.Commit() }
func (x sqlTx) Rollback(context.Context) error { return x.tx.Rollback() }

func newConformanceHarness(t testing.TB) *storetest.Harness {
	return newConformanceHarnessAt(t, filepath.Join(t.TempDir(), "outbox.db"))
}

// newConformanceHarnessAt is newConformanceHarness on a new table of the
// database file path.
func newConformanceHarnessAt(t testing.TB, path string) *storetest.Harness {
	ctx := context.Background()
	table := storetest.TableName("lite")
	s, err := sqlite.Open(ctx, "sqlite://"+path, sqlite.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	// The application's own connection, opened the recommended way.
	app, err := sql.Open(sqlite.DriverName, sqlite.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	writer, err := sqlite.New(app, sqlite.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	scale := 0.25
	if testenv.Short() {
		scale = 0.1
	}
	var noTiming string
	if raceEnabled {
		noTiming = "the race detector slows SQLite (transpiled C) down too much to time 2 s deadlines; run without -race for this test"
	}
	return &storetest.Harness{
		Store:            s,
		LoseClaimAnswers: s.LoseClaimAnswers,
		Begin: func(ctx context.Context) (storetest.Tx, error) {
			tx, err := app.BeginTx(ctx, nil)
			return sqlTx{tx, writer}, err
		},
		NewStore: func(t *testing.T, limits outbox.Limits) store.Store {
			s2, err := sqlite.New(app, sqlite.Config{Table: table, Limits: limits})
			if err != nil {
				t.Fatal(err)
			}
			return s2
		},
		// Another table in the same file, for the fan-out's copies.
		NewTable: func(t *testing.T) *storetest.Harness { return newConformanceHarnessAt(t, path) },
		Sealing: func(t *testing.T, ring *encrypt.Keyring) func(ctx context.Context) (storetest.Tx, error) {
			w, err := sqlite.New(app, sqlite.Config{Table: table, Encryption: ring})
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context) (storetest.Tx, error) {
				tx, err := app.BeginTx(ctx, nil)
				return sqlTx{tx, w}, err
			}
		},
		SingleWriter: true,
		// The relay's writers queue for the write lock in Go and hand it on
		// at once, while the application's transactions poll for it in
		// SQLite's busy handler: under the race detector a producer can wait
		// out busy_timeout, and retries, as an application does.
		Conflict:         sqlite.IsBusy,
		Scale:            scale,
		SQL:              app,
		Table:            table,
		NoDeadlineTiming: noTiming,
		SetFinishedAt: func(t testing.TB, id outbox.EventID, at time.Time) {
			t.Helper()
			if _, err := app.ExecContext(context.Background(), `UPDATE "`+table+`" SET processed_at = ? WHERE event_id = ?`,
				at.UTC().Format("2006-01-02 15:04:05.000"), id.String()); err != nil {
				t.Fatalf("set the finish time of %s: %v", id, err)
			}
		},
		// Promises: none; SQLite declares no optional capability.
	}
}

// TestConformance runs the Store conformance suite.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) *storetest.Harness { return newConformanceHarness(t) })
}

// TestRelayConformance runs the relay-over-store suite on the same harness.
func TestRelayConformance(t *testing.T) {
	t.Parallel()
	relaytest.Run(t, func(t *testing.T) *storetest.Harness { return newConformanceHarness(t) })
}
