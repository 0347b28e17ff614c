package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultMaxConnLifetime is how long ConfigurePool lets a pooled
// connection live, unless the DSN sets pool_max_conn_lifetime: a session
// pinned to a server that is no longer the primary, and that no error
// gave away, still moves to the current one within this time. Each
// connection's lifetime is up to DefaultMaxConnLifetimeJitter longer, so
// that a pool's connections do not all reconnect at once.
const (
	DefaultMaxConnLifetime       = 5 * time.Minute
	DefaultMaxConnLifetimeJitter = 30 * time.Second
)

// pgxpoolDefaultMaxConnLifetime is pgxpool's default MaxConnLifetime.
const pgxpoolDefaultMaxConnLifetime = time.Hour

// discardKey marks, in a connection's CustomData, a connection that must
// not go back to the pool.
const discardKey = "outbox.discard"

// configureFailover makes pc's pool discard a connection whose statement
// failed in a way that says the session is of no more use
// (sessionUnusable), instead of handing it to the next caller: after a
// failover the former primary stays up, read-only, and its sessions would
// fail every write until they were closed. It also shortens the
// connections' lifetime to DefaultMaxConnLifetime where the DSN did not
// set pool_max_conn_lifetime and the pool has pgxpool's default (one
// hour). A tracer and an AfterRelease hook the caller set are kept, and
// running it twice changes nothing more.
func configureFailover(pc *pgxpool.Config) {
	if pc.MaxConnLifetime == pgxpoolDefaultMaxConnLifetime && !dsnSets(pc.ConnString(), "pool_max_conn_lifetime") {
		pc.MaxConnLifetime = DefaultMaxConnLifetime
	}
	if pc.MaxConnLifetimeJitter == 0 && !dsnSets(pc.ConnString(), "pool_max_conn_lifetime_jitter") {
		pc.MaxConnLifetimeJitter = DefaultMaxConnLifetimeJitter
	}
	if hasDiscardTracer(pc.ConnConfig.Tracer) {
		return
	}
	if pc.ConnConfig.Tracer == nil {
		pc.ConnConfig.Tracer = discardTracer{}
	} else {
		pc.ConnConfig.Tracer = multitracer.New(pc.ConnConfig.Tracer, discardTracer{})
	}
	afterRelease := pc.AfterRelease
	pc.AfterRelease = func(c *pgx.Conn) bool {
		if c.PgConn().CustomData()[discardKey] != nil {
			return false
		}
		return afterRelease == nil || afterRelease(c)
	}
}

// dsnSets reports whether the connection string names the setting key.
func dsnSets(connString, key string) bool {
	return strings.Contains(connString, key+"=")
}

func hasDiscardTracer(t pgx.QueryTracer) bool {
	switch t := t.(type) {
	case discardTracer:
		return true
	case *multitracer.Tracer:
		return slices.ContainsFunc(t.QueryTracers, hasDiscardTracer)
	}
	return false
}

// sessionUnusable reports whether err means that the session that gave it
// should be closed rather than reused: the server refuses writes (25006
// read_only_sql_transaction: a standby, or a former primary after a
// failover, or default_transaction_read_only), it is shutting down or has
// ended the session (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03
// cannot_connect_now), or the connection failed (class 08).
func sessionUnusable(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "25006", "57P01", "57P02", "57P03":
		return true
	}
	return strings.HasPrefix(pe.Code, "08")
}

// discardTracer marks the connection of a statement that failed with
// sessionUnusable; the pool's AfterRelease hook then closes it.
type discardTracer struct{}

func markIfUnusable(conn *pgx.Conn, err error) {
	if conn != nil && err != nil && sessionUnusable(err) {
		conn.PgConn().CustomData()[discardKey] = true
	}
}

func (discardTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (discardTracer) TraceQueryEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	markIfUnusable(conn, data.Err)
}

func (discardTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (discardTracer) TraceBatchQuery(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	markIfUnusable(conn, data.Err)
}

func (discardTracer) TraceBatchEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	markIfUnusable(conn, data.Err)
}

func (discardTracer) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	return ctx
}

func (discardTracer) TraceCopyFromEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceCopyFromEndData) {
	markIfUnusable(conn, data.Err)
}

func (discardTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	return ctx
}

func (discardTracer) TracePrepareEnd(_ context.Context, conn *pgx.Conn, data pgx.TracePrepareEndData) {
	markIfUnusable(conn, data.Err)
}
