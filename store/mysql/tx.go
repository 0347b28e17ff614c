package mysql

import (
	"context"
	"database/sql"
	"log/slog"
	"time"

	"github.com/txoutbox/outbox/store/internal/retry"
)

// Retry bounds for deadlocks and lock wait timeouts.
const (
	maxAttempts  = 10
	firstBackoff = 5 * time.Millisecond
	maxBackoff   = 500 * time.Millisecond
)

// retry runs f again when it fails with a deadlock (1213) or a lock wait
// timeout (1205): InnoDB rolled back the transaction (or the statement), so
// f, which runs a whole transaction, can simply run again. Every retry is
// counted and logged at DEBUG with the operation; a conflict that outlasts
// the retries is logged at WARN and returned.
func (s *Store) retry(ctx context.Context, op string, f func() error) error {
	return retry.Policy{
		Attempts: maxAttempts,
		First:    firstBackoff,
		Max:      maxBackoff,
		Jitter:   true,
		Retryable: func(err error) bool {
			code := mysqlErrorNumber(err)
			return code == errDeadlock || code == errLockWaitTimeout
		},
		OnRetry: func(err error, attempt int, wait time.Duration) {
			code := mysqlErrorNumber(err)
			if code == errDeadlock {
				s.deadlocks.Add(1)
			} else {
				s.lockWaits.Add(1)
			}
			s.log.LogAttrs(ctx, slog.LevelDebug, "outbox mysql: lock conflict; retrying the transaction",
				slog.String("op", op), slog.String("conflict", conflictKind(code)), slog.Int("code", int(code)),
				slog.Int("attempt", attempt), slog.Duration("retry_in", wait))
		},
		OnGiveUp: func(err error, attempt int) {
			s.gaveUp.Add(1)
			code := mysqlErrorNumber(err)
			s.log.Warn("outbox mysql: lock conflict persisted after retries", "op", op, "conflict", conflictKind(code),
				"code", code, "attempts", attempt, "err", err)
		},
		OnCancel: func(error) { s.gaveUp.Add(1) },
	}.Do(ctx, f)
}

// conflictKind names a conflict's error number in log lines.
func conflictKind(code uint16) string {
	if code == errLockWaitTimeout {
		return "lock wait timeout"
	}
	return "deadlock"
}

// inTx runs f in one of the store's transactions, at READ COMMITTED, and
// commits it; the whole transaction is retried on deadlocks and lock wait
// timeouts. The COMMIT is not cancelled with ctx: once the work is done, a
// cancellation must not turn a commit into an ambiguous one.
func (s *Store) inTx(ctx context.Context, op string, f func(tx *sql.Tx) error) error {
	return s.retry(ctx, op, func() error {
		// Statements run under ctx; the transaction itself does not, so
		// that database/sql does not roll it back behind our back when ctx
		// ends between the last statement and the COMMIT.
		tx, err := s.db.BeginTx(context.WithoutCancel(ctx), s.txOpts)
		if err != nil {
			return err
		}
		if err := f(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}
