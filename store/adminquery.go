package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/txoutbox/outbox"
)

// AdminQueries are the admin API's store-level reads and the relay
// heartbeat writes.
type AdminQueries interface {
	// QueryEvents returns up to q.Limit events matching q, newest first
	// (id descending), without their payloads and headers.
	QueryEvents(ctx context.Context, q EventQuery) ([]Record, error)
	// MatchIDs returns up to limit events matching q with id > afterID,
	// in id order (the order a bulk action applies them in).
	MatchIDs(ctx context.Context, q EventQuery, afterID int64, limit int) ([]MatchedEvent, error)
	// CountBlockedBehind counts the BLOCKED events of the aggregates of the
	// events whose ids are given, and how many of them are past their
	// deadline (the blast radius of releasing those aggregates).
	CountBlockedBehind(ctx context.Context, ids []int64) (blocked, pastDeadline int64, err error)
	// FailedEvents returns up to limit FAILED events, oldest first, for
	// grouping; it reads the FAILED partial index.
	FailedEvents(ctx context.Context, limit int) ([]Record, error)
	// BlockedChains returns up to limit aggregates held behind a FAILED
	// head, each with its head and up to chainLimit BLOCKED events after it.
	BlockedChains(ctx context.Context, limit, chainLimit int) ([]BlockedChain, error)
	// Throughput counts the attempts of the last `since` per minute and
	// outcome, from the attempts table's finished_at index.
	Throughput(ctx context.Context, since time.Duration) ([]ThroughputBucket, error)
	// PublishDurations returns the publish times (the sink call's start to
	// its finish, as the relay recorded them) of the deliveries and of the
	// attempts that called the sink (DELIVERED, RETRY and FAILED attempt
	// rows) finished in the last `since` of the database clock, newest
	// first, at most limit of them.
	//
	// The figure is per event: a batch delivered in one sink call (a row of
	// PostgreSQL's deliveries table) counts its publish time once for each
	// of its n events, so that a percentile over the list is one over the
	// events, as a percentile of the attempt rows (one per event) is; the
	// limit counts events, so the oldest batch in the list may be cut.
	// PostgreSQL's batches are in the window by their completed_at (the
	// completion's commit, which its index keeps); its event rows'
	// delivered_* columns (deliveries from before migration 10) are not
	// read: no index on them survives that migration. Each part is read
	// newest first through its index and bounded by limit.
	PublishDurations(ctx context.Context, since time.Duration, limit int) ([]time.Duration, error)
	// Relays returns the relays whose heartbeat is younger than within.
	Relays(ctx context.Context, within time.Duration) ([]RelayHeartbeat, error)
	// Heartbeat upserts one relay's heartbeat row (heartbeat_at = the
	// database clock).
	Heartbeat(ctx context.Context, h RelayHeartbeat) error
	// RemoveRelay deletes a relay's heartbeat row (at a clean stop).
	RemoveRelay(ctx context.Context, relayID string) error
	// Close releases what the queries opened of their own (never the
	// store's pool or database).
	Close() error
}

// EventQuery is the admin API's event filter. Zero fields match anything.
type EventQuery struct {
	Statuses      []outbox.Status
	AggregateType string
	AggregateID   string
	EventType     string
	CreatedAfter  time.Time
	CreatedBefore time.Time
	// ErrorContains matches a substring of last_error (LIKE, with the
	// pattern characters escaped).
	ErrorContains string
	// BeforeID pages backwards: only events with id < BeforeID.
	BeforeID int64
	// Limit defaults to 50 and is capped at 500.
	Limit int
}

// MaxQueryLimit caps EventQuery.Limit.
const MaxQueryLimit = 500

// Normalize fills the defaults of q and checks its statuses.
func (q EventQuery) Normalize() (EventQuery, error) {
	if q.Limit <= 0 {
		q.Limit = 50
	}
	if q.Limit > MaxQueryLimit {
		q.Limit = MaxQueryLimit
	}
	for _, s := range q.Statuses {
		if !slices.Contains(outbox.Statuses, s) {
			return q, fmt.Errorf("%w: unknown status %q", outbox.ErrInvalidConfig, s)
		}
	}
	return q, nil
}

// MatchedEvent is one event a bulk selection found.
type MatchedEvent struct {
	ID        int64
	EventID   outbox.EventID
	Status    outbox.Status
	ExpiresAt time.Time // zero if none
}

// BlockedChain is one aggregate held behind a FAILED head.
type BlockedChain struct {
	Head    Record
	Blocked []Record
	// BlockedCount counts every BLOCKED event of the aggregate behind the
	// head, beyond the listed ones too.
	BlockedCount int64
}

// RelayHeartbeat is a relay's heartbeat row.
type RelayHeartbeat struct {
	RelayID     string
	Host        string
	StartedAt   time.Time
	HeartbeatAt time.Time
	InFlight    int
}

// ThroughputBucket counts one minute's attempts of one outcome.
type ThroughputBucket struct {
	Minute  time.Time
	Outcome OutcomeKind
	Count   int64
}
