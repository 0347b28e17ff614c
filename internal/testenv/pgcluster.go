package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// LogicalVar names a PostgreSQL with wal_level=logical for the CDC tests.
const LogicalVar = "OUTBOX_TEST_LOGICAL_DSN"

// PostgresBinDir holds initdb and pg_ctl for private clusters; override
// with OUTBOX_TEST_PG_BIN.
func PostgresBinDir() string {
	if d := os.Getenv("OUTBOX_TEST_PG_BIN"); d != "" {
		return d
	}
	return "/usr/lib/postgresql/15/bin"
}

var (
	sharedLogicalOnce sync.Once
	sharedLogicalDSN  string
	sharedLogicalErr  error
	sharedCluster     *PostgresCluster
	// sharedLogicalDB is the database of this process's own on the shared
	// server (sharedLogicalServer), when LogicalPostgres uses that server.
	sharedLogicalDB, sharedLogicalServer string
)

// LogicalPostgres returns the DSN of a PostgreSQL whose wal_level is
// logical: $OUTBOX_TEST_LOGICAL_DSN when set; else, when the shared server
// ($OUTBOX_TEST_POSTGRES) has wal_level logical, a database of the test
// process's own on it (StopLogicalPostgres drops it); else a private
// cluster started once for the test binary (StopLogicalPostgres, from
// TestMain, stops it). When none can be had the test is skipped, or fails
// under CI=true, with how to fix it.
func LogicalPostgres(t testing.TB) string {
	t.Helper()
	sharedLogicalOnce.Do(func() {
		if dsn := os.Getenv(LogicalVar); dsn != "" {
			sharedLogicalDSN = dsn
			return
		}
		shared := os.Getenv(Postgres.Var)
		if shared == "" {
			shared = Postgres.Default
		}
		if walLevel(shared) == "logical" {
			dsn, name, err := createLogicalDB(shared)
			if err != nil {
				sharedLogicalErr = fmt.Errorf("the shared server's wal_level is logical, but the CDC tests could not have a database of their own on it (its role needs CREATEDB): %w", err)
				return
			}
			sharedLogicalDSN, sharedLogicalDB, sharedLogicalServer = dsn, name, shared
			return
		}
		c, err := startCluster()
		if err != nil {
			sharedLogicalErr = err
			return
		}
		sharedCluster = c
		sharedLogicalDSN = c.DSN()
	})
	if sharedLogicalErr != nil {
		msg := "no PostgreSQL with wal_level=logical: " + sharedLogicalErr.Error() +
			"; set " + LogicalVar + " to one, or run ALTER SYSTEM SET wal_level = logical on the server of " + Postgres.Var + " and restart it"
		if InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return sharedLogicalDSN
}

// StopLogicalPostgres stops and removes the private cluster LogicalPostgres
// started, or drops the database it created, if any. Call it from
// TestMain after m.Run.
func StopLogicalPostgres() {
	if sharedLogicalDB != "" {
		removeLogicalDB(sharedLogicalServer, sharedLogicalDB)
		sharedLogicalDB = ""
	}
	if sharedCluster != nil {
		sharedCluster.remove()
		sharedCluster = nil
	}
}

func walLevel(dsn string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return ""
	}
	defer conn.Close(ctx)
	var level string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return ""
	}
	return level
}

// PostgresCluster is a private PostgreSQL cluster (own port, own data
// directory, wal_level=logical), for tests that restart the server.
type PostgresCluster struct {
	dir, data, port string
	asPostgres      bool
	settings        []string // extra name=value server settings
}

// StartPostgresCluster starts a private cluster that is stopped and removed
// when t ends. It skips (fails under CI=true) when the binaries are missing.
// Each of settings ("name=value") is passed to the server after the
// defaults, e.g. "wal_level=replica".
func StartPostgresCluster(t testing.TB, settings ...string) *PostgresCluster {
	t.Helper()
	c, err := startCluster(settings...)
	if err != nil {
		msg := "cannot start a private PostgreSQL cluster: " + err.Error() + "; set OUTBOX_TEST_PG_BIN to the directory of initdb and pg_ctl"
		if InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(c.remove)
	return c
}

// DSN returns the cluster's DSN (user postgres, database postgres).
func (c *PostgresCluster) DSN() string {
	return "postgres://postgres@127.0.0.1:" + c.port + "/postgres?sslmode=disable"
}

// Stop stops the server (fast shutdown), keeping its data.
func (c *PostgresCluster) Stop() error {
	_, err := c.run("pg_ctl", "-D", c.data, "-m", "fast", "-w", "stop")
	return err
}

// Start starts the stopped server again on the same port.
func (c *PostgresCluster) Start() error {
	opts := strings.Join([]string{
		"-p " + c.port, "-c listen_addresses=127.0.0.1", "-c unix_socket_directories=" + c.dir,
		"-c wal_level=logical", "-c max_wal_senders=20", "-c max_replication_slots=20",
		// No synchronous_commit=off: the walsender sends only flushed WAL,
		// and the WAL writer's delay would add up to 200ms to each event.
		"-c fsync=off", "-c full_page_writes=off",
		"-c max_connections=100", "-c shared_buffers=32MB",
	}, " ")
	for _, kv := range c.settings {
		opts += " -c " + kv
	}
	out, err := c.run("pg_ctl", "-D", c.data, "-l", filepath.Join(c.dir, "server.log"), "-o", opts, "-w", "-t", "60", "start")
	if err != nil {
		return fmt.Errorf("pg_ctl start: %v: %s", err, out)
	}
	return nil
}

func startCluster(settings ...string) (*PostgresCluster, error) {
	if _, err := os.Stat(filepath.Join(PostgresBinDir(), "initdb")); err != nil {
		return nil, fmt.Errorf("initdb not found in %s", PostgresBinDir())
	}
	dir, err := os.MkdirTemp("", "outbox-pg-")
	if err != nil {
		return nil, err
	}
	c := &PostgresCluster{dir: dir, data: filepath.Join(dir, "data"), asPostgres: os.Geteuid() == 0, settings: settings}
	if c.asPostgres { // initdb refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root, and there is no postgres user to run initdb as")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	port, err := FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c.port = strconv.Itoa(port)
	if out, err := c.run("initdb", "-D", c.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	if err := c.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

func (c *PostgresCluster) remove() {
	_, _ = c.run("pg_ctl", "-D", c.data, "-m", "immediate", "-w", "stop")
	os.RemoveAll(c.dir)
}

func (c *PostgresCluster) run(bin string, args ...string) (string, error) {
	path := filepath.Join(PostgresBinDir(), bin)
	var cmd *exec.Cmd
	if c.asPostgres {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
