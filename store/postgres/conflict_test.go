package postgres

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// Deadlocks, serialization failures and lock-not-available errors are
// retried, also when wrapped; anything else is not.
func TestRetryableConflicts(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "40P01"}, true},
		{fmt.Errorf("claim: %w", &pgconn.PgError{Code: "40001"}), true},
		{fmt.Errorf("a: %w", fmt.Errorf("b: %w", &pgconn.PgError{Code: "55P03"})), true},
		{&pgconn.PgError{Code: "23505"}, false},
		{errors.New("connection refused"), false},
		{nil, false},
	} {
		if got := isRetryableConflict(tc.err); got != tc.want {
			t.Errorf("isRetryableConflict(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
