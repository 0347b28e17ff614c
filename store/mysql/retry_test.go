package mysql

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	mysqldrv "github.com/go-sql-driver/mysql"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestRetryCountsAndLogsConflicts(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	s := &Store{log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	ctx := context.Background()
	deadlock := &mysqldrv.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock; try restarting transaction"}
	lockWait := &mysqldrv.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded; try restarting transaction"}

	calls := 0
	err := s.retry(ctx, "complete", func() error {
		calls++
		switch calls {
		case 1, 2:
			return deadlock
		case 3:
			return lockWait
		}
		return nil
	})
	if err != nil || calls != 4 {
		t.Fatalf("retry = %v after %d calls; want success on the 4th", err, calls)
	}
	if st := s.Retries(); st.Deadlocks != 2 || st.LockWaitTimeouts != 1 || st.GaveUp != 0 {
		t.Fatalf("Retries() = %+v, want 2 deadlocks and 1 lock wait", st)
	}
	if n := strings.Count(logs.String(), "lock conflict; retrying"); n != 3 {
		t.Fatalf("%d retry log lines, want 3:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "op=complete") || !strings.Contains(logs.String(), "conflict=deadlock") {
		t.Fatalf("retry log lines lack the operation or the kind:\n%s", logs.String())
	}

	// Other errors are not retried.
	calls = 0
	missing := &mysqldrv.MySQLError{Number: 1146, Message: "Table 'test.x' doesn't exist"}
	if err := s.retry(ctx, "claim", func() error { calls++; return missing }); !errors.Is(err, missing) || calls != 1 {
		t.Fatalf("a missing table was retried: %v after %d calls", err, calls)
	}

	// A conflict that persists is returned after the bounded retries, and
	// counted as given up.
	calls = 0
	if err := s.retry(ctx, "sweep", func() error { calls++; return deadlock }); !errors.Is(err, deadlock) || calls != maxAttempts {
		t.Fatalf("persistent deadlock: %v after %d calls, want the error after %d", err, calls, maxAttempts)
	}
	if st := s.Retries(); st.GaveUp != 1 || st.Deadlocks != 2+maxAttempts-1 {
		t.Fatalf("Retries() = %+v after a persistent deadlock", st)
	}
	if !strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("giving up was not logged at WARN:\n%s", logs.String())
	}

	// A cancelled context stops the retries.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	calls = 0
	if err := s.retry(cctx, "claim", func() error { calls++; return deadlock }); err == nil || calls != 1 {
		t.Fatalf("cancelled context: %v after %d calls", err, calls)
	}
}
