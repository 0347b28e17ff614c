package cdc_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/internal/testenv/pgtest"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/postgres/cdc"
	"github.com/txoutbox/outbox/store/storetest"
)

// oneLine fails unless err is one line that contains every hint.
func oneLine(t *testing.T, err error, hints ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("error spans lines: %q", msg)
	}
	for _, h := range hints {
		if !strings.Contains(msg, h) {
			t.Errorf("error %q does not say %q", msg, h)
		}
	}
}

func TestWalLevelNotLogicalSaysHowToFix(t *testing.T) {
	t.Parallel()
	cluster := testenv.StartPostgresCluster(t, "wal_level=replica")
	pool := newPool(t, cluster.DSN())
	st, err := postgres.New(pool, postgres.Config{Table: storetest.TableName("cdc")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cdc.New(context.Background(), st, cdc.Config{})
	oneLine(t, err, `wal_level is "replica"`, "ALTER SYSTEM SET wal_level = logical", "restart PostgreSQL")
	if !errors.Is(err, cdc.ErrSetup) {
		t.Errorf("error %v is not cdc.ErrSetup", err)
	}
}

func TestMissingReplicationPrivilegeSaysHowToFix(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	role := h.table + "_role"
	if _, err := h.pool.Exec(ctx, fmt.Sprintf(`CREATE ROLE %q LOGIN NOREPLICATION`, role)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = h.pool.Exec(context.Background(), fmt.Sprintf(`DROP ROLE IF EXISTS %q`, role)) })
	cfg, err := pgconn.ParseConfig(h.dsn)
	if err != nil {
		t.Fatal(err)
	}
	dsn := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", role, cfg.Host, cfg.Port, cfg.Database)
	st, err := postgres.New(newPool(t, dsn), postgres.Config{Table: h.table})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cdc.New(ctx, st, cdc.Config{Slot: h.slot, Publication: h.pub})
	oneLine(t, err, "no replication privilege", "ALTER ROLE", "WITH REPLICATION")
}

func TestTableWithoutPrimaryKeySaysHowToFix(t *testing.T) {
	t.Parallel()
	dsn := testenv.LogicalPostgres(t)
	pool := newPool(t, dsn)
	table := storetest.TableName("cdc_nopk")
	ctx := context.Background()
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %q (id bigint, payload json)`, table)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), pgtest.DropTables(table)) })
	st, err := postgres.New(pool, postgres.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cdc.New(ctx, st, cdc.Config{})
	oneLine(t, err, "has no primary key", "ADD PRIMARY KEY (id)")

	missing, err := postgres.New(pool, postgres.Config{Table: table + "_missing"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cdc.New(ctx, missing, cdc.Config{})
	oneLine(t, err, "does not exist", "outbox migrate")
}

func TestBadSlotNameIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	_, err := cdc.New(context.Background(), h.store, cdc.Config{Slot: "Bad-Slot; drop"})
	oneLine(t, err, `slot name "Bad-Slot; drop" is not allowed`, "a-z, 0-9 and _")
	if !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("error %v is not outbox.ErrInvalidConfig", err)
	}
}

// A slot another process streams from (here a bare replication
// connection, as pg_recvlogical would hold it): the relay logs one line
// that names the slot and says what to do, and keeps trying.
func TestSlotHeldByAnotherProcessSaysHowToFix(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	src := h.source(t, cdcConfig()) // creates the slot and publication
	ctx := context.Background()
	cfg, err := pgconn.ParseConfig(h.dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["replication"] = "database"
	other, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if err := pglogrepl.StartReplication(ctx, other, h.slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + h.pub + "'"},
	}); err != nil {
		t.Fatal(err)
	}

	var logs testenv.Buffer
	src2, err := cdc.New(ctx, h.store, cdc.Config{Slot: h.slot, Publication: h.pub, Lease: time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	_ = src
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src2.Listen(lctx, func() {}) }()
	eventually(t, 30*time.Second, "the busy slot to be reported", func() bool {
		return len(logs.Lines("is held by another process")) > 0
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Listen: %v", err)
	}
	line := logs.Lines("is held by another process")[0]
	for _, hint := range []string{h.slot, "only one relay streams from a slot", "give this relay its own --slot"} {
		if !strings.Contains(line, hint) {
			t.Errorf("log line %q does not say %q", line, hint)
		}
	}
	if src2.Streaming() {
		t.Error("the source streams from a slot another process holds")
	}
}

// A publication of that name that does not publish the outbox table is
// refused with the statement that fixes it.
func TestPublicationOfAnotherTableSaysHowToFix(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	other := h.table + "_other"
	if _, err := h.pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %q (id bigint PRIMARY KEY)`, other)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.pool.Exec(ctx, fmt.Sprintf(`CREATE PUBLICATION %q FOR TABLE %q`, h.pub, other)); err != nil {
		t.Fatal(err)
	}
	_, err := cdc.New(ctx, h.store, cdc.Config{Slot: h.slot, Publication: h.pub})
	oneLine(t, err, "does not publish table", "ALTER PUBLICATION", "ADD TABLE")
}
