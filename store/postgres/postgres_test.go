package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/internal/testenv/pgtest"
	"github.com/txoutbox/outbox/relay/relaytest"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/storetest"
)

type pgTx struct {
	tx pgx.Tx
	s  *postgres.Store
}

func (p pgTx) Enqueue(ctx context.Context, events ...outbox.Event) ([]outbox.EventID, error) {
	return p.s.Enqueue(ctx, p.tx, events...)
}
func (p pgTx) Commit(ctx context.Context) error   { return p.tx.Commit(ctx) }
func (p pgTx) Rollback(ctx context.Context) error { return p.tx.Rollback(ctx) }

func newPool(t testing.TB) *pgxpool.Pool { return testenv.PostgresPool(t) }

// migratedStore is a store with cfg on pool, migrated up; at the end of the
// test it is migrated down and its tables are dropped.
func migratedStore(t testing.TB, pool *pgxpool.Pool, cfg postgres.Config) *postgres.Store {
	t.Helper()
	s, err := postgres.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.MigrateUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if err := retryDeadlock(func() error { return s.MigrateDown(ctx) }); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		// What MigrateDown keeps (the migration versions), or left
		// behind after a failure.
		if err := retryDeadlock(func() error {
			_, err := pool.Exec(ctx, pgtest.DropTables(cfg.Table))
			return err
		}); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return s
}

// retryDeadlock runs f again, up to three times, while it fails with a
// deadlock. A relay the test stopped may have a statement still running on
// the server for a moment: when a context ends, pgx closes the connection
// at once and the server finds out later. A sweep of the table's claims
// and the migration's DDL then lock the same tables in opposite orders,
// and PostgreSQL ends one of them; the migration is one transaction,
// rolled back, and runs again.
func retryDeadlock(f func() error) error {
	err := f()
	for i := 0; i < 3 && err != nil; i++ {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40P01" { // deadlock_detected
			return err
		}
		err = f()
	}
	return err
}

func newHarness(t testing.TB) *storetest.Harness { return newHarnessOn(t, storetest.TableName("pg")) }

// newHarnessOn is newHarness on the outbox table named table.
func newHarnessOn(t testing.TB, table string) *storetest.Harness {
	pool := newPool(t)
	s := migratedStore(t, pool, postgres.Config{Table: table})
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	return &storetest.Harness{
		Store:            s,
		LoseClaimAnswers: s.LoseClaimAnswers,
		Begin: func(ctx context.Context) (storetest.Tx, error) {
			tx, err := pool.Begin(ctx)
			return pgTx{tx, s}, err
		},
		NewStore: func(t *testing.T, limits outbox.Limits) store.Store {
			s2, err := postgres.New(pool, postgres.Config{Table: table, Limits: limits})
			if err != nil {
				t.Fatal(err)
			}
			return s2
		},
		// Another table on the same database, for the fan-out's copies.
		NewTable: func(t *testing.T) *storetest.Harness { return newHarness(t) },
		Sealing: func(t *testing.T, ring *encrypt.Keyring) func(ctx context.Context) (storetest.Tx, error) {
			s2, err := postgres.New(pool, postgres.Config{Table: table, Encryption: ring})
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context) (storetest.Tx, error) {
				tx, err := pool.Begin(ctx)
				return pgTx{tx, s2}, err
			}
		},
		Scale: scale(),
		SQL:   db,
		Table: table,
		Bind:  pgtest.DollarPlaceholders,
		SetFinishedAt: func(t testing.TB, id outbox.EventID, at time.Time) {
			t.Helper()
			if _, err := pool.Exec(context.Background(), `UPDATE "`+table+`" SET processed_at = $1 WHERE event_id = $2::uuid`, at, id.String()); err != nil {
				t.Fatalf("set the finish time of %s: %v", id, err)
			}
		},
		Promises: storetest.Capabilities{SkipLocked: true, ClaimBehindOwn: true, Listener: true, EnqueueObserver: true,
			CursorGuard: true, GaugeLeaser: true, AdoptionReporter: true},
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

// TestRetryDeadlock: the cleanup's retry runs again on a deadlock, up to
// three more times, and gives up at once on any other error.
func TestRetryDeadlock(t *testing.T) {
	t.Parallel()
	deadlock := fmt.Errorf("revert migrations: migration 10: %w", &pgconn.PgError{Severity: "ERROR", Code: "40P01", Message: "deadlock detected"})
	for _, tc := range []struct {
		name      string
		errs      []error
		wantCalls int
		wantErr   bool
	}{
		{"two deadlocks, then done", []error{deadlock, deadlock, nil}, 3, false},
		{"deadlocks every time", []error{deadlock, deadlock, deadlock, deadlock, deadlock}, 4, true},
		{"another error", []error{errors.New("relation does not exist"), nil}, 1, true},
	} {
		calls := 0
		err := retryDeadlock(func() error {
			calls++
			return tc.errs[calls-1]
		})
		if calls != tc.wantCalls || (err != nil) != tc.wantErr {
			t.Errorf("%s: %d calls, err %v; want %d calls, error %v", tc.name, calls, err, tc.wantCalls, tc.wantErr)
		}
	}
}
