package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
)

// Snapshot implements store.Store: every figure is read in one read
// transaction. SQLite has no lease for the gauges (store.GaugeLeaser): it
// has one writer, and one relay per database file is the rule.
func (s *Store) Snapshot(ctx context.Context, req store.SnapshotRequest) (store.Snapshot, error) {
	var snap store.Snapshot
	err := s.readTx(ctx, func(c *sql.Conn, now string) error {
		snap = backend.NewSnapshot(req)
		var pending, processing, blocked, failed int64
		var oldest, oldestDue sql.NullString
		if err := c.QueryRowContext(ctx, s.q.snapshot, now).Scan(&pending, &processing, &blocked, &failed,
			&oldestDue, &snap.DeadLetters); err != nil {
			return err
		}
		snap.Counts[outbox.StatusPending], snap.Counts[outbox.StatusProcessing] = pending, processing
		snap.Counts[outbox.StatusBlocked], snap.Counts[outbox.StatusFailed] = blocked, failed
		dbNow, err := parseTime(now)
		if err != nil {
			return err
		}
		snap.DBTime = dbNow
		if snap.OldestDuePendingAge, err = ageSince(dbNow, oldestDue); err != nil {
			return err
		}
		if req.Full {
			if err := c.QueryRowContext(ctx, s.q.oldestPending).Scan(&oldest); err != nil {
				return err
			}
			if snap.OldestPendingAge, err = ageSince(dbNow, oldest); err != nil {
				return err
			}
			rows, err := c.QueryContext(ctx, s.q.finalCounts)
			if err != nil {
				return err
			}
			err = backend.ScanStatusCounts(rows, snap.Counts)
			rows.Close()
			if err != nil {
				return err
			}
		}
		if !req.FailedBlocks {
			return nil
		}
		rows, err := c.QueryContext(ctx, s.q.blockedAg)
		if err != nil {
			return err
		}
		defer rows.Close()
		return backend.ScanBlockedAggregates(rows, req.BlockedListLimit(), &snap, func(b *store.BlockedAggregate, total *int64) error {
			return rows.Scan(&b.AggregateType, &b.AggregateID, &b.FailedEventID, &b.Waiting, total)
		})
	})
	if err != nil {
		return snap, s.wrap("snapshot", err)
	}
	return snap, nil
}

// ageSince returns now minus the stored time t; 0 when t is NULL.
func ageSince(now time.Time, t sql.NullString) (time.Duration, error) {
	if !t.Valid {
		return 0, nil
	}
	at, err := parseTime(t.String)
	if err != nil {
		return 0, err
	}
	return max(now.Sub(at), 0), nil
}
