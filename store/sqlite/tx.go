package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/txoutbox/outbox/store/internal/lanes"
	"github.com/txoutbox/outbox/store/internal/retry"
	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// yieldWait is how long a yielding lease transaction waits for the lock.
const yieldWait = 200 * time.Millisecond

// tryWriteTx runs f in one write transaction if the write lock can be had
// within wait (in this process's writer gate, then SQLite's busy handler),
// and returns lanes.ErrBusy otherwise. It is not retried.
func (s *Store) tryWriteTx(ctx context.Context, wait time.Duration, f func(c *sql.Conn) error) error {
	gate := s.writerGate()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case gate <- struct{}{}:
	case <-timer.C:
		return lanes.ErrBusy
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-gate }()
	c, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	// The connection's own busy_timeout (the DSN's) is put back after.
	var timeout int64
	if err := c.QueryRowContext(ctx, s.q.busyTimeout).Scan(&timeout); err != nil {
		return err
	}
	if _, err := c.ExecContext(ctx, setBusyTimeout(max(wait.Milliseconds(), 1))); err != nil {
		return err
	}
	defer func() {
		if _, err := c.ExecContext(context.WithoutCancel(ctx), setBusyTimeout(timeout)); err != nil {
			_ = c.Raw(func(any) error { return driver.ErrBadConn }) // not back to the pool with the short timeout
		}
	}()
	done := false
	defer func() {
		if !done {
			s.rollback(c)
		}
	}()
	if _, err := c.ExecContext(ctx, s.q.beginImmediate); err != nil {
		if isBusy(err) {
			return lanes.ErrBusy
		}
		return err
	}
	if err := f(c); err != nil {
		return err
	}
	if _, err := c.ExecContext(context.WithoutCancel(ctx), s.q.commit); err != nil {
		return err
	}
	done = true
	return nil
}

// isBusy reports whether err is SQLITE_BUSY or SQLITE_LOCKED (any extended
// code): another connection holds the lock, and trying again can help.
func isBusy(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return true
		}
	}
	return false
}

// isGenericError reports whether err is SQLite's generic SQLITE_ERROR with
// a message that contains reason. SQLite gives no finer result code for
// some failures ("no such table", "no transaction is active"); the
// primary code is checked first, so that only the engine's own errors are
// read this way.
func isGenericError(err error, reason string) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_ERROR && strings.Contains(se.Error(), reason)
}

// busyRetry is the policy of retryBusy.
var busyRetry = retry.Policy{
	Attempts:  10,
	First:     2 * time.Millisecond,
	Max:       250 * time.Millisecond,
	Jitter:    true,
	Retryable: isBusy,
}

// retryBusy runs f again when it fails with SQLITE_BUSY or SQLITE_LOCKED,
// with a growing, jittered delay, a few times. With busy_timeout set each
// attempt already waited for the lock; without it, the retries are the wait.
func retryBusy(ctx context.Context, f func() error) error {
	return busyRetry.Do(ctx, f)
}

// writeTx runs f in one write transaction: an explicit BEGIN IMMEDIATE on a
// connection of its own, so that the write lock is taken up front whatever
// the DSN's _txlock says, and f never meets SQLITE_BUSY half-way. now is the
// database clock at the start. The whole transaction is retried when the
// lock cannot be had. f must not call back into the relay: the transaction
// holds SQLite's single write lock.
func (s *Store) writeTx(ctx context.Context, f func(c *sql.Conn, now string) error) error {
	gate := s.writerGate()
	return retryBusy(ctx, func() error {
		select {
		case gate <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { <-gate }()
		c, err := s.db.Conn(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		// The rollback is armed before BEGIN: a BEGIN that took effect but
		// reported an error (its context ended as it returned) must not
		// leave the connection in the pool inside a transaction, where the
		// next BEGIN on it fails with "cannot start a transaction within a
		// transaction".
		done := false
		defer func() {
			if !done {
				s.rollback(c)
			}
		}()
		if _, err := c.ExecContext(ctx, s.q.beginImmediate); err != nil {
			return err
		}
		var now string
		if err := c.QueryRowContext(ctx, s.q.now).Scan(&now); err != nil {
			return err
		}
		if err := f(c, now); err != nil {
			return err
		}
		// The COMMIT is not cancelled with ctx: once the work is done, a
		// cancellation must not turn a commit into an ambiguous one.
		if _, err := c.ExecContext(context.WithoutCancel(ctx), s.q.commit); err != nil {
			return err
		}
		done = true
		return nil
	})
}

// gates holds one writer gate per database file (or per *sql.DB when the
// file cannot be named), shared by every Store of the process.
var gates sync.Map // string -> chan struct{}

// writerGate returns the gate that queues this process's write transactions
// on the store's database file. SQLite lets one writer in at a time and
// makes the others poll for the lock with sleeps of up to 100ms, which is
// unfair: a relay that commits and begins again at once keeps the lock while
// the others sleep. The gate is a FIFO queue in Go instead (a channel of
// capacity 1, whose blocked senders are served in order), so the relays and
// sweepers of one process take turns and a waiting writer starts as soon as
// the previous one commits. Writers in other processes, and the
// application's own transactions, still meet through SQLite's busy handler.
func (s *Store) writerGate() chan struct{} {
	s.gateOnce.Do(func() {
		key := fmt.Sprintf("db:%p", s.db)
		ctx, cancel := context.WithTimeout(context.Background(), BusyTimeout)
		defer cancel()
		var file string
		if err := s.db.QueryRowContext(ctx, s.q.databaseFile).Scan(&file); err == nil && file != "" {
			key = "file:" + file
		}
		g, _ := gates.LoadOrStore(key, make(chan struct{}, 1))
		s.gate = g.(chan struct{})
	})
	return s.gate
}

// rollback ends a failed transaction. If that fails for any reason but
// "no transaction is active" (SQLite rolls back by itself after some
// errors), the connection is discarded rather than returned to the pool
// inside a transaction that would hold the write lock.
func (s *Store) rollback(c *sql.Conn) {
	_, err := c.ExecContext(context.Background(), s.q.rollback)
	if err == nil || isGenericError(err, "no transaction is active") {
		return
	}
	s.log.Warn("outbox sqlite: rollback failed; discarding the connection", "err", err)
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
}

// readTx runs f in one read transaction (a consistent snapshot under WAL).
func (s *Store) readTx(ctx context.Context, f func(c *sql.Conn, now string) error) error {
	return retryBusy(ctx, func() error {
		c, err := s.db.Conn(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		// The rollback is armed before BEGIN: a BEGIN that took effect but
		// reported an error (its context ended as it returned) must not
		// leave the connection in the pool inside a transaction, where the
		// next BEGIN on it fails with "cannot start a transaction within a
		// transaction".
		done := false
		defer func() {
			if !done {
				s.rollback(c)
			}
		}()
		if _, err := c.ExecContext(ctx, s.q.beginDeferred); err != nil {
			return err
		}
		var now string
		if err := c.QueryRowContext(ctx, s.q.now).Scan(&now); err != nil {
			return err
		}
		if err := f(c, now); err != nil {
			return err
		}
		if _, err := c.ExecContext(ctx, s.q.commit); err != nil {
			return err
		}
		done = true
		return nil
	})
}
