// Package outbox is a transactional outbox for Go: an application writes its
// business rows and the events that describe them in one database
// transaction, and a relay delivers the committed events to an HTTP API or a
// broker.
//
// This root package holds only the user-facing types: [Event] (what a
// producer enqueues), [Message] (what a sink receives), [Status], the
// [Enqueue] entry point and the typed errors. It imports no database or broker
// driver; the backends live in store/postgres, store/sqlite and store/mysql,
// the sinks under sink/, and the relay in relay/.
//
// # Guarantees
//
// Each guarantee below has tests that fail if it breaks, run against real
// databases and brokers.
//
//  1. Atomic. An event is visible to a relay only after the transaction that
//     enqueued it commits; a rolled-back transaction never delivers anything.
//     [Enqueue] writes in the caller's transaction and never commits on its
//     own.
//  2. At least once. Every committed event ends PROCESSED, FAILED
//     (dead-lettered, with an alarm) or EXPIRED, whatever crashes. Rows left
//     PROCESSING by a dead relay return to PENDING once their lease ends.
//  3. Per-aggregate order. Events of one (aggregate_type, aggregate_id) are
//     delivered in id order, across retries, crashes and many relays; one
//     aggregate's failure does not hold up the others. By default a FAILED
//     event holds back the later events of its own aggregate (status BLOCKED)
//     until an operator requeues or skips it.
//  4. Bounded duplicates. A duplicate happens only after a crash, an expired
//     lease or an ambiguous acknowledgement, and is bounded by the work in
//     flight. Every delivery carries a stable, globally unique [EventID]
//     (UUIDv7) so that brokers and consumers can drop repeats.
//  5. Fencing. Every state change is a compare-and-set on (status, claim
//     token), so a relay whose lease expired changes nothing. Lease and due
//     times are computed with the database clock.
//  6. No database transaction is held open across a call to a sink.
//  7. An event past its deadline (expires_at) is never delivered: it ends
//     EXPIRED with the reason in its audit trail.
//
// # Enqueueing
//
// Validate-then-write: [Enqueue] checks every event (required fields, valid
// UTF-8, JSON payload, size limits, header syntax) before anything is written,
// and reports the first problem as an [*InvalidEventError] that matches
// [ErrInvalidEvent] with errors.Is.
package outbox
