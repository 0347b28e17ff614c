package mysql_test

import (
	"context"
	"testing"

	"github.com/txoutbox/outbox/relay/relaytest"
	"github.com/txoutbox/outbox/store/mysql"
	"github.com/txoutbox/outbox/store/storetest"
)

// TestUpgradeFromVersion1 applies migration 2 to a populated version-1
// table: rows in every state are kept and the unfinished ones numbered.
func TestUpgradeFromVersion1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	table := storetest.TableName("myup")
	t.Cleanup(func() {
		if err := storetest.DropMySQLTables(context.Background(), db, table); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	s, err := mysql.New(db, mysql.Config{Table: table, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MigrateUpTo(ctx, 1); err != nil {
		t.Fatal(err)
	}
	relaytest.RunUpgradeFromV1(t, relaytest.UpgradeHarness{
		Store: s, DB: db, Table: table,
		InsertV1: "INSERT INTO `" + table + "` (event_id, aggregate_type, aggregate_id, event_type, payload, headers, status, " +
			"created_at, available_at, locked_until) VALUES (?, 'payment', ?, 'OldEvent', '{\"old\":true}', '{}', ?, " +
			"UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) - INTERVAL 1 HOUR)",
		MigrateUp: func(ctx context.Context) error { _, err := s.MigrateUp(ctx); return err },
	})
}

// TestUpgradeDeliveryOnRow applies migration 6, which records a
// successful delivery on the event row, to a populated version-5 table,
// and reverts it.
func TestUpgradeDeliveryOnRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	table := storetest.TableName("mydlv")
	t.Cleanup(func() {
		if err := storetest.DropMySQLTables(context.Background(), db, table); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	s, err := mysql.New(db, mysql.Config{Table: table, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MigrateUpTo(ctx, 5); err != nil {
		t.Fatal(err)
	}
	storetest.RunDeliveryOnRowUpgrade(t, storetest.DeliveryUpgrade{
		Harness: &storetest.Harness{Store: s, SQL: db, Table: table,
			Begin: func(ctx context.Context) (storetest.Tx, error) {
				tx, err := db.BeginTx(ctx, nil)
				return myTx{tx, s}, err
			}},
		Q: "`", Now: "UTC_TIMESTAMP(6)", Before: 5,
		MigrateUp:     func(ctx context.Context) error { _, err := s.MigrateUp(ctx); return err },
		MigrateDownTo: s.MigrateDownTo,
	})
}
