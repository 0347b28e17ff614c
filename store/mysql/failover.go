package mysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync/atomic"
)

// MySQL and MariaDB error numbers after which a session is of no more use
// to the store: sessionUnusable.
const (
	errServerShutdown    = 1053 // ER_SERVER_SHUTDOWN
	errOptionPrevents    = 1290 // ER_OPTION_PREVENTS_STATEMENT: --read-only, --super-read-only
	errReadOnlyTx        = 1792 // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
	errReadOnlyMode      = 1836 // ER_READ_ONLY_MODE
	errConnectionKilled  = 1927 // MariaDB ER_CONNECTION_KILLED
	errServerGone        = 2006 // CR_SERVER_GONE_ERROR
	errServerLost        = 2013 // CR_SERVER_LOST
	errServerLostExtened = 2055 // CR_SERVER_LOST_EXTENDED
)

// sessionUnusable reports whether err means that the connection that gave
// it should be closed rather than pooled: the server refuses writes (a
// replica, or a former primary after a failover, with read_only or
// super_read_only on; or a session whose transactions are read-only), it
// is shutting down or killed the session, or the connection was lost.
// Errors about the values of a statement keep the connection.
func sessionUnusable(err error) bool {
	if err == nil {
		return false
	}
	switch mysqlErrorNumber(err) {
	case errServerShutdown, errOptionPrevents, errReadOnlyTx, errReadOnlyMode,
		errConnectionKilled, errServerGone, errServerLost, errServerLostExtened:
		return true
	}
	return false
}

// failoverConn is a driver connection that database/sql stops pooling
// once one of its statements failed with sessionUnusable: IsValid and
// ResetSession then say it is bad, and database/sql closes it and opens a
// new one for the next caller. After a failover the former primary stays
// up, read-only, and its sessions would fail every write until closed.
type failoverConn struct {
	base driver.Conn // go-sql-driver/mysql's connection
	bad  atomic.Bool
}

// The interfaces go-sql-driver/mysql's connection implements, all kept.
var (
	_ driver.ConnBeginTx        = (*failoverConn)(nil)
	_ driver.ConnPrepareContext = (*failoverConn)(nil)
	_ driver.ExecerContext      = (*failoverConn)(nil)
	_ driver.QueryerContext     = (*failoverConn)(nil)
	_ driver.Pinger             = (*failoverConn)(nil)
	_ driver.NamedValueChecker  = (*failoverConn)(nil)
	_ driver.SessionResetter    = (*failoverConn)(nil)
	_ driver.Validator          = (*failoverConn)(nil)
)

// check marks the connection bad if err says so, and returns err.
func (c *failoverConn) check(err error) error {
	if sessionUnusable(err) {
		c.bad.Store(true)
	}
	return err
}

func (c *failoverConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *failoverConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var st driver.Stmt
	var err error
	if p, ok := c.base.(driver.ConnPrepareContext); ok {
		st, err = p.PrepareContext(ctx, query)
	} else {
		st, err = c.base.Prepare(query)
	}
	if err != nil {
		return nil, c.check(err)
	}
	return &failoverStmt{base: st, c: c}, nil
}

func (c *failoverConn) Close() error { return c.base.Close() }

func (c *failoverConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *failoverConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	b, ok := c.base.(driver.ConnBeginTx)
	if !ok {
		return nil, errors.New("mysql driver connection cannot begin transactions with options")
	}
	tx, err := b.BeginTx(ctx, opts)
	if err != nil {
		return nil, c.check(err)
	}
	return &failoverTx{base: tx, c: c}, nil
}

func (c *failoverConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	ex, ok := c.base.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	res, err := ex.ExecContext(ctx, query, args)
	return res, c.check(err)
}

func (c *failoverConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.base.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	rows, err := q.QueryContext(ctx, query, args)
	return rows, c.check(err)
}

func (c *failoverConn) Ping(ctx context.Context) error {
	if p, ok := c.base.(driver.Pinger); ok {
		return c.check(p.Ping(ctx))
	}
	return nil
}

func (c *failoverConn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.base.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *failoverConn) ResetSession(ctx context.Context) error {
	if c.bad.Load() {
		return driver.ErrBadConn
	}
	if r, ok := c.base.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *failoverConn) IsValid() bool {
	if c.bad.Load() {
		return false
	}
	if v, ok := c.base.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

// failoverTx marks its connection bad when a commit or rollback fails
// with sessionUnusable.
type failoverTx struct {
	base driver.Tx
	c    *failoverConn
}

func (t *failoverTx) Commit() error   { return t.c.check(t.base.Commit()) }
func (t *failoverTx) Rollback() error { return t.c.check(t.base.Rollback()) }

// failoverStmt marks its connection bad when a statement fails with
// sessionUnusable.
type failoverStmt struct {
	base driver.Stmt
	c    *failoverConn
}

var (
	_ driver.StmtExecContext   = (*failoverStmt)(nil)
	_ driver.StmtQueryContext  = (*failoverStmt)(nil)
	_ driver.NamedValueChecker = (*failoverStmt)(nil)
)

func (s *failoverStmt) Close() error  { return s.base.Close() }
func (s *failoverStmt) NumInput() int { return s.base.NumInput() }

func (s *failoverStmt) Exec(args []driver.Value) (driver.Result, error) {
	res, err := s.base.Exec(args) //nolint:staticcheck // the driver's own fallback
	return res, s.c.check(err)
}

func (s *failoverStmt) Query(args []driver.Value) (driver.Rows, error) {
	rows, err := s.base.Query(args) //nolint:staticcheck // the driver's own fallback
	return rows, s.c.check(err)
}

func (s *failoverStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	ex, ok := s.base.(driver.StmtExecContext)
	if !ok {
		return nil, errors.New("mysql driver statement cannot execute with a context")
	}
	res, err := ex.ExecContext(ctx, args)
	return res, s.c.check(err)
}

func (s *failoverStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := s.base.(driver.StmtQueryContext)
	if !ok {
		return nil, errors.New("mysql driver statement cannot query with a context")
	}
	rows, err := q.QueryContext(ctx, args)
	return rows, s.c.check(err)
}

func (s *failoverStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := s.base.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}
