package store

import (
	"time"
)

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
