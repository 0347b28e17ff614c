package testenv

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// sharedLogicalServerOrSkip returns the shared server's DSN when its
// wal_level is logical, the case in which each test process gets a
// database of its own.
func sharedLogicalServerOrSkip(t *testing.T) string {
	t.Helper()
	if os.Getenv(LogicalVar) != "" {
		t.Skip(LogicalVar + " is set: the CDC tests use that database as it is")
	}
	shared := os.Getenv(Postgres.Var)
	if shared == "" {
		shared = Postgres.Default
	}
	if walLevel(shared) != "logical" {
		t.Skip("the shared PostgreSQL is not reachable or its wal_level is not logical")
	}
	return shared
}

func connectOrFatal(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// countDatabaseAndSlots counts the databases named name (0 or 1) and the
// replication slots in it.
func countDatabaseAndSlots(t *testing.T, server *pgx.Conn, name string) (dbs, slots int) {
	t.Helper()
	if err := server.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM pg_database WHERE datname = $1),
		(SELECT count(*) FROM pg_replication_slots WHERE database = $1)`, name).Scan(&dbs, &slots); err != nil {
		t.Fatal(err)
	}
	return dbs, slots
}

// LogicalPostgres gives the process a database of its own on the shared
// server, and StopLogicalPostgres drops it with its replication slots.
func TestLogicalPostgresDatabaseOfItsOwn(t *testing.T) {
	shared := sharedLogicalServerOrSkip(t)
	// A fresh start, as in a new test process (-count=2 runs this twice).
	sharedLogicalOnce, sharedLogicalDSN, sharedLogicalErr = sync.Once{}, "", nil
	dsn := LogicalPostgres(t)
	name := sharedLogicalDB
	if !strings.HasPrefix(name, fmt.Sprintf("%s%d_", logicalDBPrefix, os.Getpid())) {
		t.Fatalf("the process's database is %q, want one named %s<pid>_...", name, logicalDBPrefix)
	}
	ctx := context.Background()
	own := connectOrFatal(t, dsn)
	var current string
	if err := own.QueryRow(ctx, `SELECT current_database()`).Scan(&current); err != nil {
		t.Fatal(err)
	}
	if current != name {
		t.Fatalf("LogicalPostgres's DSN connects to %q, want %q", current, name)
	}
	if _, err := own.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, name+"_slot"); err != nil {
		t.Fatal(err)
	}
	own.Close(ctx)

	StopLogicalPostgres()
	server := connectOrFatal(t, shared)
	if dbs, slots := countDatabaseAndSlots(t, server, name); dbs != 0 || slots != 0 {
		t.Errorf("after StopLogicalPostgres: %d databases and %d slots named %s, want none", dbs, slots, name)
	}
}

// A database left by a test process that no longer runs is dropped, with
// its slot, when the next process creates its own; a running process's is
// kept.
func TestOrphanLogicalDatabasesDropped(t *testing.T) {
	shared := sharedLogicalServerOrSkip(t)
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	// Under a prefix of this process (outbox_logical_<pid>_t), which the
	// other test processes leave alone while it runs: they would drop the
	// orphan below as theirs to drop, under this test's feet.
	prefix := fmt.Sprintf("%s%d_t", logicalDBPrefix, os.Getpid())
	orphan := fmt.Sprintf("%s%d_%08x", prefix, done.Process.Pid, uint32(time.Now().UnixNano()))
	alive := fmt.Sprintf("%s%d_%08x", prefix, os.Getpid(), uint32(time.Now().UnixNano()))
	ctx := context.Background()
	server := connectOrFatal(t, shared)
	for _, db := range []string{orphan, alive} {
		if _, err := server.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, db := range []string{orphan, alive} {
			_ = dropLogicalDB(context.Background(), server, db)
		}
	})
	u, err := url.Parse(shared)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + orphan
	left := connectOrFatal(t, u.String())
	if _, err := left.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, orphan+"_slot"); err != nil {
		t.Fatal(err)
	}
	left.Close(ctx)

	dropOrphansNamed(ctx, server, prefix)
	if dbs, slots := countDatabaseAndSlots(t, server, orphan); dbs != 0 || slots != 0 {
		t.Errorf("the orphan %s: %d databases, %d slots left, want none", orphan, dbs, slots)
	}
	if dbs, _ := countDatabaseAndSlots(t, server, alive); dbs != 1 {
		t.Errorf("the running process's database %s was dropped", alive)
	}
}
