package mysql_test

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox/relay/relaytest"
	"github.com/txoutbox/outbox/store"
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
// again (and migration 7 after it).
func TestDeliveryOnRowMigrationCutShort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	table := storetest.TableName("mycut")
	s := storeAtVersion(t, db, table, 6)
	for _, q := range []string{
		"ALTER TABLE `" + s.Table() + "` DROP INDEX `" + s.Table() + "_delivered_idx`",
		"ALTER TABLE `" + s.Table() + "` DROP COLUMN delivered_trace_id, DROP COLUMN delivered_token",
		"DELETE FROM `" + s.Tables().Migrations + "` WHERE version_id = 6",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := s.MigrateUpTo(ctx, 6); err != nil {
		t.Fatalf("migrating again: %v", err)
	}
	if cur, _, err := s.MigrationVersion(ctx); err != nil || cur != 6 {
		t.Fatalf("version after migrating again = %d, %v; want 6", cur, err)
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

// TestUpgradeToLanes applies migration 7 (lanes) to a populated version-6
// table, delivers what it holds with relays of the new version, and
// reverts it.
func TestUpgradeToLanes(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	table := storetest.TableName("mylanesup")
	s := storeAtVersion(t, db, table, 6)
	storetest.RunLanesUpgrade(t, storetest.LanesUpgrade{
		Harness: &storetest.Harness{Store: s, SQL: db, Table: table,
			Begin: func(ctx context.Context) (storetest.Tx, error) {
				tx, err := db.BeginTx(ctx, nil)
				return myTx{tx, s}, err
			}},
		Q: "`", Now: "UTC_TIMESTAMP(6)", Soon: "UTC_TIMESTAMP(6) + INTERVAL 1 SECOND", Before: 6,
		MigrateUp:     func(ctx context.Context) error { _, err := s.MigrateUp(ctx); return err },
		MigrateDownTo: s.MigrateDownTo,
	})
}

// schemaOf describes the tables named after table: their columns, indexes
// and triggers, as information_schema lists them.
func schemaOf(t *testing.T, db *sql.DB, table string) []string {
	t.Helper()
	like := strings.ReplaceAll(table, "_", `\_`) + "%"
	var out []string
	for _, q := range []string{
		`SELECT CONCAT_WS(' ', table_name, column_name, column_type, is_nullable, COALESCE(column_default, '-'), extra,
			COALESCE(generation_expression, '')) FROM information_schema.columns
		 WHERE table_schema = DATABASE() AND table_name LIKE ? ORDER BY table_name, ordinal_position`,
		`SELECT CONCAT_WS(' ', table_name, index_name, seq_in_index, column_name, non_unique) FROM information_schema.statistics
		 WHERE table_schema = DATABASE() AND table_name LIKE ? ORDER BY table_name, index_name, seq_in_index`,
		`SELECT CONCAT_WS(' ', trigger_name, action_timing, event_manipulation, action_statement) FROM information_schema.triggers
		 WHERE trigger_schema = DATABASE() AND event_object_table LIKE ? ORDER BY trigger_name`,
	} {
		rows, err := db.QueryContext(context.Background(), q, like)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(line, "_schema_migrations") {
				out = append(out, line)
			}
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestLanesMigrationDownRestoresVersion6: migration 7 and back leave the
// schema of version 6 exactly (columns, indexes, triggers, tables), and
// every row and status.
func TestLanesMigrationDownRestoresVersion6(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	table := storetest.TableName("mylanesdown")
	s := storeAtVersion(t, db, table, 6)
	h := &storetest.Harness{Store: s, SQL: db, Table: table,
		Begin: func(ctx context.Context) (storetest.Tx, error) {
			tx, err := db.BeginTx(ctx, nil)
			return myTx{tx, s}, err
		}}
	storetest.Enqueue(t, h, storetest.PaymentEvent("down-1", 1), storetest.PaymentEvent("down-1", 2), storetest.PaymentEvent("down-2", 1))
	if _, err := db.ExecContext(ctx, "UPDATE `"+table+"` SET status = 'FAILED' WHERE aggregate_id = 'down-2'"); err != nil {
		t.Fatal(err)
	}
	rows := func() string {
		var out string
		if err := db.QueryRowContext(ctx, "SELECT GROUP_CONCAT(CONCAT_WS(':', id, event_id, status, aggregate_seq) ORDER BY id) FROM `"+table+"`").Scan(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	before, beforeRows := schemaOf(t, db, table), rows()
	if err := s.MigrateUpTo(ctx, 7); err != nil {
		t.Fatal(err)
	}
	// A claim in flight when the downgrade runs vanishes with its table;
	// its rows stay PENDING.
	c, err := s.Claim(ctx, store.ClaimRequest{RelayID: "down", Limit: 10, Lease: time.Minute, FailedBlocks: true})
	if err != nil || len(c.Events) != 2 {
		t.Fatalf("claimed %d events, %v; want down-1's two events", len(c.Events), err)
	}
	if err := s.MigrateDownTo(ctx, 6); err != nil {
		t.Fatal(err)
	}
	if after := schemaOf(t, db, table); !slices.Equal(after, before) {
		t.Errorf("schema after migration 7 and back:\n%s\nwant version 6's:\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
	if got := rows(); got != beforeRows {
		t.Errorf("rows after migration 7 and back: %s; want %s", got, beforeRows)
	}
	// Run again (a downgrade cut short), it changes nothing.
	if _, err := db.ExecContext(ctx, "INSERT INTO `"+s.Tables().Migrations+"` (version_id, is_applied) VALUES (7, 1)"); err != nil {
		t.Fatal(err)
	}
	if err := s.MigrateDownTo(ctx, 6); err != nil {
		t.Fatalf("the downgrade again: %v", err)
	}
	if after := schemaOf(t, db, table); !slices.Equal(after, before) {
		t.Errorf("schema after the downgrade ran twice:\n%s", strings.Join(after, "\n"))
	}
}

// TestLanesMigrationCutShort: migration 7 checks information_schema (or
// uses IF NOT EXISTS, INSERT IGNORE) at each step, so a run cut short after
// some of them (the version not recorded) is finished by running it again:
// the unfinished rows written meanwhile get their lane, and every lane
// table is complete.
func TestLanesMigrationCutShort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{Table: storetest.TableName("mylanescut")})
	h := &storetest.Harness{Store: s, SQL: db, Table: s.Table(),
		Begin: func(ctx context.Context) (storetest.Tx, error) {
			tx, err := db.BeginTx(ctx, nil)
			return myTx{tx, s}, err
		}}
	storetest.Enqueue(t, h, storetest.PaymentEvent("cut-1", 1), storetest.PaymentEvent("cut-2", 1))
	tb := "`" + s.Table() + "`"
	for _, q := range []string{
		"DROP TRIGGER `" + s.Table() + "_lane`",
		"ALTER TABLE " + tb + " DROP INDEX `" + s.Table() + "_lane_due_idx`",
		"DROP TABLE `" + s.Table() + "_claims`",
		"DELETE FROM `" + s.Table() + "_lanes` WHERE lane >= 40",
		"UPDATE " + tb + " SET lane = NULL",
		"DELETE FROM `" + s.Tables().Migrations + "` WHERE version_id >= 7", // with the later ones, as before them
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// A producer writes while the trigger is missing.
	storetest.Enqueue(t, h, storetest.PaymentEvent("cut-1", 2))
	applied, err := s.MigrateUp(ctx)
	if err != nil || len(applied) == 0 || applied[0] != 7 {
		t.Fatalf("migrating again = %v, %v; want version 7 (and the later ones) applied", applied, err)
	}
	storetest.Enqueue(t, h, storetest.PaymentEvent("cut-3", 1))
	var lanes, wrong, unset, idx, trg, claims int
	if err := db.QueryRowContext(ctx, `SELECT
		(SELECT COUNT(*) FROM `+"`"+s.Table()+"_lanes`"+`),
		(SELECT COUNT(*) FROM `+tb+` o JOIN `+"`"+s.Table()+"_aggregates`"+` a
		   ON a.aggregate_type = o.aggregate_type AND a.aggregate_id = o.aggregate_id WHERE o.lane <> a.lane),
		(SELECT COUNT(*) FROM `+tb+` WHERE lane IS NULL OR lane < 0 OR lane >= 64),
		(SELECT COUNT(DISTINCT index_name) FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ? AND index_name = ?),
		(SELECT COUNT(*) FROM information_schema.triggers WHERE trigger_schema = DATABASE() AND trigger_name = ?),
		(SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?)`,
		s.Table(), s.Table()+"_lane_due_idx", s.Table()+"_lane", s.Table()+"_claims").Scan(&lanes, &wrong, &unset, &idx, &trg, &claims); err != nil {
		t.Fatal(err)
	}
	if lanes != 64 || wrong != 0 || unset != 0 || idx != 1 || trg != 1 || claims != 1 {
		t.Fatalf("after the second run: %d lanes (want 64), %d rows in a lane other than their aggregate's and %d without a lane (want 0), lane index %d, trigger %d, claims table %d (want 1 each)",
			lanes, wrong, unset, idx, trg, claims)
	}
	// And the relays deliver all four.
	c, err := s.Claim(ctx, store.ClaimRequest{RelayID: "cut", Limit: 10, Lease: time.Minute, FailedBlocks: true})
	if err != nil || len(c.Events) != 4 {
		t.Fatalf("claimed %d events, %v; want the four", len(c.Events), err)
	}
}
