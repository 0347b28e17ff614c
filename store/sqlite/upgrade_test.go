package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/txoutbox/outbox/relay/relaytest"
	"github.com/txoutbox/outbox/store/sqlite"
	"github.com/txoutbox/outbox/store/storetest"
)

// TestUpgradeFromVersion1 applies migration 2, which rebuilds the table,
// to a populated version-1 table: rows in every state are kept with their
// ids, the unfinished ones are numbered, and the AUTOINCREMENT counter
// survives, so the id of a purged row is never handed out again.
func TestUpgradeFromVersion1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "outbox.db")
	table := storetest.TableName("liteup")
	s, err := sqlite.Open(ctx, "sqlite://"+path, sqlite.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.MigrateUpTo(ctx, 1); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open(sqlite.DriverName, sqlite.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var purged int64
	relaytest.RunUpgradeFromV1(t, relaytest.UpgradeHarness{
		Store: s, DB: db, Table: `"` + table + `"`,
		InsertV1: `INSERT INTO "` + table + `" (event_id, aggregate_type, aggregate_id, event_type, payload, status, locked_until)
			VALUES (?, 'payment', ?, 'OldEvent', '{"old":true}', ?, strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hour'))`,
		BeforeUpgrade: func(ctx context.Context) error {
			// The newest row was purged: its id must stay used.
			res, err := db.ExecContext(ctx, `INSERT INTO "`+table+`" (event_id, aggregate_type, aggregate_id, event_type, payload)
				VALUES ('00000000-0000-7000-8000-000000000001', 'payment', 'gone', 'E', '{}')`)
			if err != nil {
				return err
			}
			if purged, err = res.LastInsertId(); err != nil {
				return err
			}
			_, err = db.ExecContext(ctx, `DELETE FROM "`+table+`" WHERE id = ?`, purged)
			return err
		},
		MigrateUp: func(ctx context.Context) error { _, err := s.MigrateUp(ctx); return err },
	})
	var first int64
	if err := db.QueryRowContext(ctx, `SELECT min(id) FROM "`+table+`" WHERE event_type = 'AfterUpgrade'`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if first <= purged {
		t.Fatalf("the first event after the upgrade got id %d, not above the purged row's %d: the AUTOINCREMENT counter was lost", first, purged)
	}
}

// TestUpgradeDeliveryOnRow applies migration 6, which records a
// successful delivery on the event row, to a populated version-5 table,
// and reverts it.
func TestUpgradeDeliveryOnRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "outbox.db")
	table := storetest.TableName("litedlv")
	s, err := sqlite.Open(ctx, "sqlite://"+path, sqlite.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.MigrateUpTo(ctx, 5); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open(sqlite.DriverName, sqlite.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	storetest.RunDeliveryOnRowUpgrade(t, storetest.DeliveryUpgrade{
		Harness: &storetest.Harness{Store: s, SQL: db, Table: table,
			Begin: func(ctx context.Context) (storetest.Tx, error) {
				tx, err := db.BeginTx(ctx, nil)
				return sqlTx{tx, s}, err
			}},
		Q: `"`, Now: "strftime('%Y-%m-%d %H:%M:%f', 'now')", Soon: "strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 second')", Before: 5,
		MigrateUp:     func(ctx context.Context) error { _, err := s.MigrateUp(ctx); return err },
		MigrateDownTo: s.MigrateDownTo,
	})
}

// TestUpgradeToLanes applies migration 7 (lanes) to a populated version-6
// table, delivers what it holds with relays of the new version, and
// reverts it.
func TestUpgradeToLanes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "outbox.db")
	table := storetest.TableName("litelanesup")
	s, err := sqlite.Open(ctx, "sqlite://"+path, sqlite.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.MigrateUpTo(ctx, 6); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open(sqlite.DriverName, sqlite.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	storetest.RunLanesUpgrade(t, storetest.LanesUpgrade{
		Harness: &storetest.Harness{Store: s, SQL: db, Table: table,
			Begin: func(ctx context.Context) (storetest.Tx, error) {
				tx, err := db.BeginTx(ctx, nil)
				return sqlTx{tx, s}, err
			}},
		Q: `"`, Now: "strftime('%Y-%m-%d %H:%M:%f', 'now')", Soon: "strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 second')", Before: 6,
		MigrateUp:     func(ctx context.Context) error { _, err := s.MigrateUp(ctx); return err },
		MigrateDownTo: s.MigrateDownTo,
	})
}
