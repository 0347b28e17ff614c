package relay

import (
	"context"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// Store is what a relay needs of a store: the methods it calls, and no
// more. Every [store.Store] is one. Of the optional capabilities that
// [store.Features] declares, the relay uses Listener and EnqueueObserver
// (wake-ups), CursorGuard (the check of the id sequence at start) and
// AdoptionReporter (what retention keeps).
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
	// MoveToHistory moves finished events past the retention into the
	// history; DropHistoryBefore drops the months of history past its
	// retention, whole.
	MoveToHistory(ctx context.Context, req store.HistoryMoveRequest) (int64, error)
	DropHistoryBefore(ctx context.Context, cutoff time.Time) (store.HistoryDrop, error)
	// CountMovable counts the events a relay can still move, to tell when
	// the outbox is drained.
	CountMovable(ctx context.Context, failedBlocks bool) (int64, error)
	// Overdue reads what passed its deadline while no relay ran (the
	// restart report).
	Overdue(ctx context.Context) (store.Overdue, error)
	// BalanceLanes and ReleaseLanes renew, balance and give back the
	// relay's lanes.
	BalanceLanes(ctx context.Context, relayID string, lease time.Duration) error
	ReleaseLanes(ctx context.Context, relayID string) error
	// Routes and ChangeRoute read and move the routes' circuit breakers.
	Routes(ctx context.Context) (store.RouteSnapshot, error)
	ChangeRoute(ctx context.Context, c store.RouteChange) (bool, error)
	// Features declares the store's optional capabilities.
	Features() store.Features
}

// Every store.Store can drive a relay.
var _ Store = store.Store(nil)
