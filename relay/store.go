package relay

import (
	"context"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// Store is what a relay needs of a store: the methods it calls, and no
// more. Every [store.Store] is one. When the store also implements them,
// the relay uses [store.RouteStore] (the circuit breaker's shared state),
// [store.Listener] and [store.EnqueueObserver] (wake-ups) and
// [store.OverdueReporter] (the restart report).
type Store interface {
	// Claim claims the next batch (see [store.Store]).
	Claim(ctx context.Context, req store.ClaimRequest) (*store.Claim, error)
	// Complete records a batch's outcomes under its claim token.
	Complete(ctx context.Context, req store.CompleteRequest) (store.CompleteResult, error)
	// GetEvent reads one event: while Complete keeps failing, whether the
	// database still answers (so that it refuses the write itself).
	GetEvent(ctx context.Context, id outbox.EventID) (store.Record, error)
	// Sweep reaps expired leases, expires events and keeps BLOCKED in step.
	Sweep(ctx context.Context, req store.SweepRequest) (store.SweepResult, error)
	// Purge deletes final events past the retention.
	Purge(ctx context.Context, req store.PurgeRequest) (int64, error)
	// CountMovable counts the events a relay can still move, to tell when
	// the outbox is drained.
	CountMovable(ctx context.Context, failedBlocks bool) (int64, error)
	// Features declares the store's optional capabilities.
	Features() store.Features
}

// Every store.Store can drive a relay.
var _ Store = store.Store(nil)
