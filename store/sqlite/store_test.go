package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/sqlite"
)

func TestParsePath(t *testing.T) {
	good := map[string]string{
		"sqlite:///var/lib/outbox.db":  "/var/lib/outbox.db",
		"sqlite://outbox.db":           "outbox.db",
		"sqlite://data/outbox.db":      "data/outbox.db",
		"SQLITE:///tmp/a%20b.db":       "/tmp/a b.db",
		"/tmp/outbox.db":               "/tmp/outbox.db",
		"./outbox.db":                  "./outbox.db",
		"outbox.db":                    "outbox.db",
		"  sqlite:///x/y.db  ":         "/x/y.db",
		"sqlite:///with space/odd.db":  "/with space/odd.db",
		"sqlite:///tmp/percent%25.db":  "/tmp/percent%.db",
		"relative/dir/with.dots.db":    "relative/dir/with.dots.db",
		"sqlite:///tmp/outbox":         "/tmp/outbox",
		"sqlite:///tmp/ünïcödé.sqlite": "/tmp/ünïcödé.sqlite",
	}
	for dsn, want := range good {
		got, err := sqlite.ParsePath(dsn)
		if err != nil || got != want {
			t.Errorf("ParsePath(%q) = %q, %v; want %q", dsn, got, err, want)
		}
	}
	bad := []string{
		"", "sqlite://", "sqlite:///", "sqlite::memory:", "sqlite:outbox.db", ":memory:",
		"file:outbox.db", "sqlite:///x.db?_pragma=foo", "sqlite://dir/",
		"postgres://user:s3cret@db:5432/app", "mysql://root:hunter2@host/db",
	}
	for _, dsn := range bad {
		_, err := sqlite.ParsePath(dsn)
		if err == nil {
			t.Errorf("ParsePath(%q) succeeded, want an error", dsn)
			continue
		}
		if !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("ParsePath(%q): error %v does not match ErrInvalidConfig", dsn, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, "sqlite:///absolute/path.db") || !strings.Contains(msg, "plain file path") {
			t.Errorf("ParsePath(%q): error %q does not list the accepted forms", dsn, msg)
		}
		if strings.Contains(msg, "s3cret") || strings.Contains(msg, "hunter2") {
			t.Errorf("ParsePath(%q): error %q leaks a password", dsn, msg)
		}
	}
}

func TestOpenForms(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, dsn := range []string{
		"sqlite://" + filepath.Join(dir, "a.db"),
		filepath.Join(dir, "b.db"),
		"sqlite://" + filepath.Join(dir, "odd #name?.db"),
	} {
		s, err := sqlite.Open(ctx, strings.NewReplacer("#", "%23", "?", "%3F").Replace(dsn), sqlite.Config{})
		if err != nil {
			t.Fatalf("Open(%q): %v", dsn, err)
		}
		var mode string
		if err := s.DB().QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || !strings.EqualFold(mode, "wal") {
			t.Errorf("Open(%q): journal_mode = %q, %v; want wal", dsn, mode, err)
		}
		var busy int
		if err := s.DB().QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil || busy != 10000 {
			t.Errorf("Open(%q): busy_timeout = %d, %v; want 10000", dsn, busy, err)
		}
		var fk int
		if err := s.DB().QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil || fk != 1 {
			t.Errorf("Open(%q): foreign_keys = %d, %v; want 1", dsn, fk, err)
		}
		if _, err := s.MigrateUp(ctx); err != nil {
			t.Fatalf("Open(%q): migrate: %v", dsn, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.DB().PingContext(ctx); err == nil {
			t.Errorf("Open(%q): the store's own database is still open after Close", dsn)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "odd #name?.db")); err != nil {
		t.Errorf("escaped file name: %v", err)
	}
	if _, err := sqlite.Open(ctx, "postgres://u:p@h/db", sqlite.Config{}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("Open(postgres DSN) = %v, want ErrInvalidConfig", err)
	}
}

func TestNewConfig(t *testing.T) {
	if _, err := sqlite.New(nil, sqlite.Config{}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("New(nil) = %v, want ErrInvalidConfig", err)
	}
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, name := range []string{"Bad", "x; drop table y", "a-b", strings.Repeat("a", 41)} {
		if _, err := sqlite.New(db, sqlite.Config{Table: name}); !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("New(table %q) = %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := sqlite.New(db, sqlite.Config{Limits: outbox.Limits{MaxPayloadBytes: -1}}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("New(negative limits) = %v, want ErrInvalidConfig", err)
	}
	s, err := sqlite.New(db, sqlite.Config{Table: "payment_outbox", Limits: outbox.Limits{MaxPayloadBytes: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Table() != "payment_outbox" || s.Tables().Attempts != "payment_outbox_attempts" {
		t.Errorf("tables = %+v", s.Tables())
	}
	if l := s.EnqueueLimits(); l.MaxPayloadBytes != 10 || l.MaxHeadersBytes != outbox.DefaultMaxHeadersBytes {
		t.Errorf("limits = %+v", l)
	}
	if f := s.Features(); f.SkipLocked || f.Listener != nil {
		t.Errorf("features = %+v, want neither SKIP LOCKED nor NOTIFY", f)
	}
	var _ store.Store = s
	var _ outbox.Writer[*sql.Tx] = s
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Ping(); err != nil {
		t.Errorf("Close closed the caller's database: %v", err)
	}
}

// A caller's *sql.DB opened without any of the recommended pragmas (no WAL,
// no busy timeout, deferred transactions) still works: the store's writes
// are explicit BEGIN IMMEDIATE transactions.
func TestCallerDBWithoutPragmas(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "plain.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := sqlite.New(db, sqlite.Config{Table: "payment_outbox"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := s.Enqueue(ctx, tx, ev("p-1", 1), ev("p-1", 2))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	c, err := s.Claim(ctx, store.ClaimRequest{RelayID: "r", Limit: 10, Lease: 60e9})
	if err != nil || !sameIDs(eventIDs(c), ids) {
		t.Fatalf("claim = %v, %v; want %v", c, err, ids)
	}
	res, err := s.Complete(ctx, store.CompleteRequest{Token: c.Token, RelayID: "r", Outcomes: outcomes(c, store.Delivered)})
	if err != nil || len(res.Applied) != 2 {
		t.Fatalf("complete = %+v, %v", res, err)
	}
	st, err := s.Stats(ctx, true)
	if err != nil || st.Counts[outbox.StatusProcessed] != 2 {
		t.Fatalf("stats = %+v, %v", st, err)
	}
}

func TestMigrateUpDownUp(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	s, err := sqlite.Open(ctx, path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// Before any migration, every operation says what to do.
	if _, err := s.Stats(ctx, true); err == nil || !strings.Contains(err.Error(), "run `outbox migrate` first") {
		t.Errorf("stats before migrate: %v; want advice to run `outbox migrate`", err)
	}
	if _, err := s.Claim(ctx, store.ClaimRequest{RelayID: "r", Limit: 1, Lease: 60e9}); err == nil || !strings.Contains(err.Error(), "outbox migrate") {
		t.Errorf("claim before migrate: %v; want advice to run `outbox migrate`", err)
	}
	cur, latest, err := s.MigrationVersion(ctx)
	if err != nil || cur != 0 || latest < 1 {
		t.Fatalf("version before = %d, %d, %v; want 0 and the latest", cur, latest, err)
	}

	applied, err := s.MigrateUp(ctx)
	if err != nil || len(applied) == 0 || applied[0] != 1 || applied[len(applied)-1] != latest {
		t.Fatalf("up = %v, %v; want 1 to %d", applied, err, latest)
	}
	nApplied := len(applied)
	applied, err = s.MigrateUp(ctx)
	if err != nil || len(applied) != 0 {
		t.Fatalf("second up = %v, %v; want nothing", applied, err)
	}
	if cur, l, err := s.MigrationVersion(ctx); err != nil || cur != latest || l != latest {
		t.Fatalf("version after up = %d, %d, %v", cur, l, err)
	}
	tables := func() []string {
		rows, err := s.DB().QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'outbox_events%' ORDER BY name`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var n string
			rows.Scan(&n)
			out = append(out, n)
		}
		return out
	}
	for _, want := range []string{"outbox_events", "outbox_events_aggregates", "outbox_events_attempts", "outbox_events_dead_letters", "outbox_events_relays", "outbox_events_schema_migrations"} {
		if !slices.Contains(tables(), want) {
			t.Fatalf("tables after up: %v, no %s", tables(), want)
		}
	}
	// The partial indexes exist, the seventh migration 00006's index of
	// the deliveries recorded on rows.
	var nIdx int
	if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND sql LIKE '%WHERE%' AND tbl_name = 'outbox_events'`).Scan(&nIdx); err != nil || nIdx != 7 {
		t.Errorf("partial indexes on the outbox table: %d, %v; want 7", nIdx, err)
	}

	if err := s.MigrateDown(ctx); err != nil {
		t.Fatalf("down: %v", err)
	}
	if got := tables(); len(got) != 1 || got[0] != "outbox_events_schema_migrations" {
		t.Fatalf("tables after down: %v; want only the version table", got)
	}
	if cur, _, err := s.MigrationVersion(ctx); err != nil || cur != 0 {
		t.Fatalf("version after down = %d, %v", cur, err)
	}
	applied, err = s.MigrateUp(ctx)
	if err != nil || len(applied) != nApplied {
		t.Fatalf("up after down = %v, %v", applied, err)
	}
	if _, err := s.Stats(ctx, true); err != nil {
		t.Fatalf("stats after up/down/up: %v", err)
	}

	// Two outboxes live side by side in one file.
	other, err := sqlite.New(s.DB(), sqlite.Config{Table: "merchant_outbox"})
	if err != nil {
		t.Fatal(err)
	}
	if applied, err := other.MigrateUp(ctx); err != nil || len(applied) != nApplied {
		t.Fatalf("second outbox up = %v, %v", applied, err)
	}
}

func TestSchemaChecks(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	ctx := context.Background()
	for name, q := range map[string]string{
		"bad json":   `INSERT INTO outbox_events (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('x', 'a', 'b', 'c', '{')`,
		"bad status": `INSERT INTO outbox_events (event_id, aggregate_type, aggregate_id, event_type, payload, status) VALUES ('y', 'a', 'b', 'c', '{}', 'DONE')`,
	} {
		if _, err := e.app.ExecContext(ctx, q); err == nil {
			t.Errorf("%s: insert succeeded, want a CHECK failure", name)
		}
	}
	// ids are never reused, even after the newest row is deleted.
	ids := e.enqueue(t, ev("a", 1), ev("a", 2))
	last := e.get(t, ids[1]).ID
	if _, err := e.app.ExecContext(ctx, `DELETE FROM outbox_events WHERE id = ?`, last); err != nil {
		t.Fatal(err)
	}
	next := e.get(t, e.enqueue(t, ev("a", 3))[0]).ID
	if next <= last {
		t.Errorf("id %d reused after delete (last was %d)", next, last)
	}
}
