package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/txoutbox/outbox/store/internal/retry"
)

// serializationRetry retries deadlocks and serialization failures, which
// concurrent claims, marks and sweeps can cause.
var serializationRetry = retry.Policy{
	Attempts:  10,
	First:     5 * time.Millisecond,
	Max:       500 * time.Millisecond,
	Retryable: isRetryableConflict,
}

// retrySerialization retries f on deadlocks and serialization failures,
// which concurrent claims, marks and sweeps can cause; they are never
// reported as event failures.
func retrySerialization(ctx context.Context, f func() error) error {
	return serializationRetry.Do(ctx, f)
}

func isRetryableConflict(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "40P01", "40001", "55P03": // deadlock, serialization failure, lock not available
		return true
	}
	return false
}
