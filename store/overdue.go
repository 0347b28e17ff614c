package store

import (
	"context"
	"time"
)

// OverdueReporter is implemented by stores that can tell a starting relay
// what passed its deadline while no relay ran: the events still waiting
// (PENDING, BLOCKED, or PROCESSING under a lease that ended) whose
// expires_at is behind the database clock. The sweeper or the next claim
// ends them EXPIRED.
type OverdueReporter interface {
	Overdue(ctx context.Context) (Overdue, error)
}

// Overdue summarizes the events past their deadline, unfinished.
type Overdue struct {
	Count int64
	// Oldest and Newest are the earliest and latest deadline among them.
	Oldest, Newest time.Time
	// Groups count them by aggregate and event type, the largest first
	// (at most 20), each with one aggregate id as a sample
	// (to compute its route).
	Groups []OverdueGroup
}

// OverdueGroup is one (aggregate type, event type) of an Overdue.
type OverdueGroup struct {
	AggregateType, EventType, SampleAggregateID string
	Count                                       int64
}
