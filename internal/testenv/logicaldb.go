package testenv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// logicalDBPrefix starts the name of the database each test process gets
// on a shared server with wal_level=logical.
//
// Logical decoding reads the whole server's WAL but decodes only its own
// database's changes. On the database the other packages' tests share,
// a slot once stuck at a change it could not decode ("could not map
// filenode ... to relation OID"), among the tables those tests create
// and drop all the time. A database of the process's own keeps every
// other process's tables out of its slots.
const logicalDBPrefix = "outbox_logical_"

// createLogicalDB creates a database of this process's own on the server
// of dsn and returns its DSN and name. It first drops the databases that
// earlier test processes on this machine left (killed before they could).
func createLogicalDB(dsn string) (string, string, error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", "", fmt.Errorf("%s is not a postgres:// URL; set %s to the DSN of a database the CDC tests may use", Postgres.Var, LogicalVar)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", "", err
	}
	defer conn.Close(ctx)
	dropOrphanLogicalDBs(ctx, conn)
	name := fmt.Sprintf("%s%d_%08x", logicalDBPrefix, os.Getpid(), rand.Uint32())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", "", fmt.Errorf("create database %s: %w", name, err)
	}
	u.Path = "/" + name
	return u.String(), name, nil
}

// dropOrphanLogicalDBs drops the databases of test processes that no
// longer run (their pid is in the name), best effort.
func dropOrphanLogicalDBs(ctx context.Context, conn *pgx.Conn) {
	dropOrphansNamed(ctx, conn, logicalDBPrefix)
}

// dropOrphansNamed drops the databases named prefix<pid>_... whose process
// no longer runs. The test of it uses a prefix of its own, under its own
// pid, so that the copies of the suite running beside it keep their hands
// off its orphans.
func dropOrphansNamed(ctx context.Context, conn *pgx.Conn, prefix string) {
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE starts_with(datname, $1)`, prefix)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range names {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(name, prefix), "_", 2)[0])
		if err != nil || processRuns(pid) {
			continue
		}
		_ = dropLogicalDB(ctx, conn, name)
	}
}

// dropLogicalDB ends the database's sessions, drops its replication slots
// and then the database.
func dropLogicalDB(ctx context.Context, conn *pgx.Conn, name string) error {
	_, _ = conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, name)
	slotsErr := dropSlots(ctx, conn, name)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return errors.Join(slotsErr, fmt.Errorf("drop database %s: %w", name, err))
	}
	return nil
}

// dropSlots drops the database's replication slots, waiting for the
// walsenders just terminated to release theirs, until ctx ends.
func dropSlots(ctx context.Context, conn *pgx.Conn, name string) error {
	for {
		_, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active`, name)
		left := 0
		if err == nil {
			err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = $1`, name).Scan(&left)
		}
		if err == nil && left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drop the replication slots of %s: %w (last error: %v)", name, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// removeLogicalDB drops the database createLogicalDB made, from the server
// of dsn (the shared server's DSN).
func removeLogicalDB(dsn, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: could not drop database %s: %v\n", name, err)
		return
	}
	defer conn.Close(ctx)
	if err := dropLogicalDB(ctx, conn, name); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: could not drop database %s: %v\n", name, err)
	}
}
