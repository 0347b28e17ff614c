package mysql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/txoutbox/outbox/relay/relaytest"
	"github.com/txoutbox/outbox/store/mysql"
	"github.com/txoutbox/outbox/store/storetest"
)

// storeAtVersion is a store on a table of its own migrated to version,
// whose tables are dropped when the test ends.
func storeAtVersion(t *testing.T, db *sql.DB, table string, version int64) *mysql.Store {
	t.Helper()
	t.Cleanup(func() {
		if err := storetest.DropMySQLTables(context.Background(), db, table); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	s, err := mysql.New(db, mysql.Config{Table: table, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MigrateUpTo(context.Background(), version); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestUpgradeFromVersion1 applies migration 2 to a populated version-1
// table: rows in every state are kept and the unfinished ones numbered.
func TestUpgradeFromVersion1(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	table := storetest.TableName("myup")
	s := storeAtVersion(t, db, table, 1)
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
	db := openDB(t)
	table := storetest.TableName("mydlv")
	s := storeAtVersion(t, db, table, 5)
	storetest.RunDeliveryOnRowUpgrade(t, storetest.DeliveryUpgrade{
		Harness: &storetest.Harness{Store: s, SQL: db, Table: table,
			Begin: func(ctx context.Context) (storetest.Tx, error) {
				tx, err := db.BeginTx(ctx, nil)
				return myTx{tx, s}, err
			}},
		Q: "`", Now: "UTC_TIMESTAMP(6)", Soon: "UTC_TIMESTAMP(6) + INTERVAL 1 SECOND", Before: 5,
		MigrateUp:     func(ctx context.Context) error { _, err := s.MigrateUp(ctx); return err },
		MigrateDownTo: s.MigrateDownTo,
	})
}

// TestDeliveryOnRowMigrationCutShort: migration 6 adds six columns and an
// index, each step checking information_schema first, so a run cut short
// after some of them (the version not recorded) is finished by running it
// again.
func TestDeliveryOnRowMigrationCutShort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{Table: storetest.TableName("mycut")})
	for _, q := range []string{
		"ALTER TABLE `" + s.Table() + "` DROP INDEX `" + s.Table() + "_delivered_idx`",
		"ALTER TABLE `" + s.Table() + "` DROP COLUMN delivered_trace_id, DROP COLUMN delivered_token",
		"DELETE FROM `" + s.Tables().Migrations + "` WHERE version_id = 6",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	applied, err := s.MigrateUp(ctx)
	if err != nil || len(applied) != 1 || applied[0] != 6 {
		t.Fatalf("migrating again = %v, %v; want version 6 applied", applied, err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT
		(SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? AND column_name LIKE 'delivered\_%')
		+ (SELECT COUNT(DISTINCT index_name) FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ? AND index_name = ?)`,
		s.Table(), s.Table(), s.Table()+"_delivered_idx").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 7 {
		t.Fatalf("%d of the six delivered_* columns and the index after the second run, want 7", n)
	}
}
