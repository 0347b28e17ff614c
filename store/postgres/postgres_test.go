package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
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
		if err := s.MigrateDown(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		// What MigrateDown keeps (the migration versions), or left
		// behind after a failure.
		if _, err := pool.Exec(context.Background(), storetest.DropPostgresTables(cfg.Table)); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return s
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
		Scale: scale(),
		SQL:   db,
		Table: table,
		Bind:  storetest.DollarPlaceholders,
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
	storetest.Run(t, func(t *testing.T) *storetest.Harness { return newHarness(t) })
}

// TestRelayConformance runs the relay-over-store suite on the same harness.
func TestRelayConformance(t *testing.T) {
	relaytest.Run(t, func(t *testing.T) *storetest.Harness { return newHarness(t) })
}
