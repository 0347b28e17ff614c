// Package snapshotsql reads a store.Snapshot inside one read-only
// transaction, for the server backends (PostgreSQL and MySQL): the order of
// the reads, what each fills in and the names of the failed steps are
// here; each backend gives its statements and how its driver returns the
// clock, the ages and the event ids (its dialect.Dialect).
package snapshotsql

import (
	"context"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/dialect"
)

// Tx is the read-only transaction the snapshot reads in, as the backend's
// driver offers it.
type Tx interface {
	// QueryRow runs a statement that returns one row and scans it.
	QueryRow(ctx context.Context, query string, args []any, dest ...any) error
	// Query runs a statement that returns rows.
	Query(ctx context.Context, query string, args ...any) (Rows, error)
}

// Rows are the rows of Tx.Query.
type Rows interface {
	backend.Rows
	Close()
}

// Statements are a backend's statements of the snapshot, the named
// statements snapshot.figures, snapshot.oldest_pending,
// snapshot.final_counts and admin.blocked_aggregates of its sql/*.sql.
type Statements struct {
	// Figures returns, in one row: the database clock, the PENDING,
	// PROCESSING, BLOCKED and FAILED counts, the age of the oldest due
	// PENDING event and the count of dead letters not requeued.
	Figures string
	// OldestPending returns the age of the oldest PENDING event; its
	// arguments are OldestPendingArgs(clock).
	OldestPending     string
	OldestPendingArgs func(clock time.Time) []any
	// FinalCounts returns (status, count) rows of the final statuses.
	FinalCounts string
	// BlockedAggregates returns (aggregate_type, aggregate_id, event id,
	// waiting, total count) rows.
	BlockedAggregates string
}

// Read reads the snapshot req asks for in tx. An error is returned wrapped
// by wrap with the name of the step that failed; the snapshot read so far
// is returned with it.
func Read(ctx context.Context, tx Tx, d dialect.Dialect, st *Statements, req store.SnapshotRequest, wrap func(op string, err error) error) (store.Snapshot, error) {
	snap := backend.NewSnapshot(req)
	clock, readClock := d.ScanClock()
	oldestDue, readOldestDue := d.ScanAge()
	var pending, processing, blocked, failed int64
	if err := tx.QueryRow(ctx, st.Figures, nil, clock, &pending, &processing, &blocked, &failed,
		oldestDue, &snap.DeadLetters); err != nil {
		return snap, wrap("snapshot", err)
	}
	snap.DBTime = readClock()
	snap.Counts[outbox.StatusPending], snap.Counts[outbox.StatusProcessing] = pending, processing
	snap.Counts[outbox.StatusBlocked], snap.Counts[outbox.StatusFailed] = blocked, failed
	snap.OldestDuePendingAge = readOldestDue()
	if req.Full {
		oldest, readOldest := d.ScanAge()
		if err := tx.QueryRow(ctx, st.OldestPending, st.OldestPendingArgs(snap.DBTime), oldest); err != nil {
			return snap, wrap("snapshot: oldest pending", err)
		}
		snap.OldestPendingAge = readOldest()
		rows, err := tx.Query(ctx, st.FinalCounts)
		if err != nil {
			return snap, wrap("snapshot: final counts", err)
		}
		err = backend.ScanStatusCounts(rows, snap.Counts)
		rows.Close()
		if err != nil {
			return snap, wrap("snapshot: final counts", err)
		}
	}
	if req.FailedBlocks {
		rows, err := tx.Query(ctx, st.BlockedAggregates)
		if err != nil {
			return snap, wrap("snapshot: blocked aggregates", err)
		}
		err = backend.ScanBlockedAggregates(rows, req.BlockedListLimit(), &snap, func(b *store.BlockedAggregate, total *int64) error {
			id, done := d.ScanEventID(&b.FailedEventID)
			if err := rows.Scan(&b.AggregateType, &b.AggregateID, id, &b.Waiting, total); err != nil {
				return err
			}
			if done != nil {
				done()
			}
			return nil
		})
		rows.Close()
		if err != nil {
			return snap, wrap("snapshot: blocked aggregates", err)
		}
	}
	return snap, nil
}
