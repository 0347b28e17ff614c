package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/outbox/internal/testenv/pgtest"
	"github.com/txoutbox/outbox/relay/relaytest"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/storetest"
)

// TestUpgradeFromVersion1 applies migration 2 to a populated version-1
// table: rows in every state are kept and the unfinished ones numbered.
func TestUpgradeFromVersion1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	table := storetest.TableName("pgup")
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), pgtest.DropTables(table)); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	s, err := postgres.New(pool, postgres.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MigrateUpTo(ctx, 1); err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	relaytest.RunUpgradeFromV1(t, relaytest.UpgradeHarness{
		Store: s, DB: db, Table: table, Bind: pgtest.DollarPlaceholders,
		InsertV1: `INSERT INTO ` + table + ` (event_id, aggregate_type, aggregate_id, event_type, payload, status, locked_until)
			VALUES (?::uuid, 'payment', ?, 'OldEvent', '{"old":true}', ?, now() - interval '1 hour')`,
		MigrateUp: func(ctx context.Context) error { _, err := s.MigrateUp(ctx); return err },
	})
}

// TestUpgradeToLanes applies migration 10 (lanes) to a populated version-9
// table, delivers what it holds with relays of the new version, and
// reverts it.
func TestUpgradeToLanes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	table := storetest.TableName("pglanesup")
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), pgtest.DropTables(table)); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	s, err := postgres.New(pool, postgres.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MigrateUpTo(ctx, 9); err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	storetest.RunLanesUpgrade(t, storetest.LanesUpgrade{
		Harness: &storetest.Harness{Store: s, SQL: db, Table: table, Bind: pgtest.DollarPlaceholders,
			Begin: func(ctx context.Context) (storetest.Tx, error) {
				tx, err := pool.Begin(ctx)
				return pgTx{tx, s}, err
			}},
		Q: `"`, Now: "now()", Soon: "now() + interval '1 second'", Before: 9,
		MigrateUp:     func(ctx context.Context) error { _, err := s.MigrateUp(ctx); return err },
		MigrateDownTo: s.MigrateDownTo,
	})
}
