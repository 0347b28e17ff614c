package store

import (
	"time"

	"github.com/txoutbox/outbox"
)

// SnapshotRequest says what a snapshot reads besides the cheap figures.
type SnapshotRequest struct {
	// FailedBlocks: the relays use the block policy, so aggregates with a
	// FAILED event and events after it are blocked aggregates. Without it,
	// no aggregate is blocked.
	FailedBlocks bool
	// Full also reads the figures whose cost grows with the table: the
	// counts of PROCESSED, EXPIRED and SKIPPED events (rows that pile up
	// until retention deletes them: a scan of the table, which takes
	// seconds on a table of millions of rows) and OldestPendingAge (a visit
	// of every PENDING row). The other figures read the partial indexes of
	// the unfinished statuses and the first entry of the due index. Without
	// it, Counts holds no entry for the final statuses and
	// OldestPendingAge is 0.
	Full bool
	// BlockedLimit lists up to this many blocked aggregates (at most 100);
	// 0 only counts them.
	BlockedLimit int
}

// Snapshot is the outbox's figures read at one instant.
type Snapshot struct {
	// DBTime is the database clock at the snapshot.
	DBTime time.Time
	// Counts by status: every unfinished status always; the final ones
	// (PROCESSED, EXPIRED, SKIPPED) only with SnapshotRequest.Full.
	Counts map[outbox.Status]int64
	// Full tells whether the snapshot read the figures of SnapshotRequest.Full.
	Full bool
	// OldestPendingAge is the time since the oldest PENDING event was
	// created (with SnapshotRequest.Full); 0 when nothing is pending.
	OldestPendingAge time.Duration
	// OldestDuePendingAge is the time since the oldest due PENDING event
	// became due (its available_at): events delayed on purpose or waiting
	// out a retry backoff are not due and do not count. It is how far the
	// relays are behind; 0 when nothing is due.
	OldestDuePendingAge time.Duration
	// BlockedAggregateCount counts the aggregates held back by a FAILED
	// event (with FailedBlocks); BlockedAggregates lists up to
	// SnapshotRequest.BlockedLimit of them.
	BlockedAggregateCount int64
	BlockedAggregates     []BlockedAggregate
	// DeadLetters counts the dead-letter rows not requeued.
	DeadLetters int64
}

// UnfinishedStatuses are the statuses a snapshot always counts.
var UnfinishedStatuses = []outbox.Status{outbox.StatusPending, outbox.StatusProcessing, outbox.StatusBlocked, outbox.StatusFailed}

// FinalStatuses are the statuses counted only with SnapshotRequest.Full.
var FinalStatuses = []outbox.Status{outbox.StatusProcessed, outbox.StatusExpired, outbox.StatusSkipped}

// BlockedListLimit returns req.BlockedLimit bounded to 0..100.
func (req SnapshotRequest) BlockedListLimit() int { return min(max(req.BlockedLimit, 0), 100) }
