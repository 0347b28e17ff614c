package store

// Fan-out: one outbox delivered to several destinations.
//
// A relay given a destinations file (`outbox relay --config FILE`) routes
// each event of the outbox to its destinations by copying it into an
// outbox table of each destination's own (the destination table, in the
// same database), then delivers every destination table with a relay of
// its own. Each copy is an ordinary event of its table: it has its own
// status, retries, backoff, breaker, deadline check, attempts and dead
// letter, so one destination that is down or refuses an event holds that
// aggregate at that destination only. The copies of one aggregate are
// written in the order of its events, so each destination table keeps the
// order per aggregate.
//
// The two methods below are what the router needs of a store: the copy,
// which must be safe to repeat (a router that dies after copying and
// before recording its batch copies the same events again), and the event
// types of the unfinished events, which the relay checks against the
// routes at start.

// EventTypes is one (event type, aggregate type) pair of an outbox's
// unfinished events, with the number of those events.
type EventTypes struct {
	EventType     string
	AggregateType string
	Count         int64
}
