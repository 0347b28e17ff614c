package cdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/outbox/internal/cdctrack"
)

// streamLease is the row in <table>_cdc_lease that names the one relay
// streaming from a slot. The holder renews it every third of its length;
// the others try to take it at the same pace and get it once it ended.
// PostgreSQL's own rule (a slot has one active consumer) backs it up.
type streamLease struct {
	pool   *pgxpool.Pool
	table  string // quoted lease table
	slot   string
	holder string
	length time.Duration
}

// acquire takes or renews the lease; false when another holder has it.
func (l *streamLease) acquire(ctx context.Context) (bool, error) {
	var holder string
	err := l.pool.QueryRow(ctx, fmt.Sprintf(`
INSERT INTO %[1]s AS l (slot, holder, expires_at) VALUES ($1, $2, now() + $3::bigint * interval '1 millisecond')
ON CONFLICT (slot) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
WHERE l.holder = EXCLUDED.holder OR l.expires_at < now()
RETURNING holder`, l.table), l.slot, l.holder, l.length.Milliseconds()).Scan(&holder)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cdc: take the stream lease of slot %s: %w", l.slot, err)
	}
	return true, nil
}

// release gives the lease up at a clean stop, so a standby takes over at once.
func (l *streamLease) release(ctx context.Context) {
	_, _ = l.pool.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE slot = $1 AND holder = $2`, l.table), l.slot, l.holder)
}

// keep renews the lease until ctx ends; it calls lost (once) when a renewal
// finds another holder or when renewals fail until the lease would have
// ended.
func (l *streamLease) keep(ctx context.Context, lost func()) {
	cdctrack.KeepLease(ctx, l.length, l.acquire, lost)
}
