package store

import (
	"context"
	"time"
)

// Features declares what a store can do beyond [Store]: capabilities that
// not every backend has. A backend declares them in its Features method
// (a capability field holds the store itself, or nil when it lacks it),
// and callers read them there; nothing discovers them by type assertion.
// store/storetest checks that each backend declares exactly what it
// implements, and that what it declares works.
//
//	             SkipLocked ClaimBehindOwn Listener EnqueueObserver CursorGuard GaugeLeaser AdoptionReporter
//	PostgreSQL   yes        yes            yes      yes             yes         yes         yes
//	MySQL        yes        yes            -        yes             -           yes         yes
//	SQLite       -          -              -        -               -           -           -
//
// A store that wraps another (to shift its clock, to inject faults)
// inherits the wrapped store's Features with the wrapped store's
// capabilities, and overrides Features when it must change them.
type Features struct {
	// SkipLocked: concurrent claims skip each other's rows instead of
	// waiting (PostgreSQL, MySQL 8, MariaDB 10.6). SQLite has a single writer.
	SkipLocked bool
	// ClaimBehindOwn: Claim honours ClaimRequest.Own, so a relay can claim
	// the next events of an aggregate while its earlier ones are still in
	// flight with the same relay (pipelining).
	ClaimBehindOwn bool

	// Listener wakes relays when events are committed (PostgreSQL
	// LISTEN/NOTIFY); nil when the relays find new events by polling.
	Listener Listener
	// EnqueueObserver tells relays in the same process that events were
	// just enqueued (PostgreSQL, MySQL); nil when it cannot.
	EnqueueObserver EnqueueObserver
	// CursorGuard checks the settings the lanes' id cursors depend on
	// (PostgreSQL); nil when the lanes read no cursors.
	CursorGuard CursorGuard
	// GaugeLeaser elects the one process that refreshes the cluster-wide
	// gauges (PostgreSQL, MySQL); nil when every process refreshes its own.
	GaugeLeaser GaugeLeaser
	// AdoptionReporter tells whether and when outbox adopted the table
	// (PostgreSQL, MySQL); nil on a backend that cannot adopt a table.
	AdoptionReporter AdoptionReporter
}

// Listener wakes a relay when events are committed (PostgreSQL
// LISTEN/NOTIFY). Listen calls wake for each notification (and once after
// every reconnect, since notifications sent while disconnected are lost)
// until ctx ends. A wake-up only cuts latency: the relay's polling stays
// correct without it.
type Listener interface {
	Listen(ctx context.Context, wake func()) error
}

// EnqueueObserver tells relays in the same process that events were just
// enqueued (the source's hybrid path). The events become visible when the
// producer commits, which is usually a moment later, so an observer should
// look again shortly.
type EnqueueObserver interface {
	// OnEnqueue registers f; the returned func removes it.
	OnEnqueue(f func()) (remove func())
}

// CursorGuard watches the lanes that read from id cursors (PostgreSQL): a
// claim reads a lane's events from the first id not yet finished on, and
// never looks behind it again. That is safe only while ids become visible
// in order, which the database's settings can break: a sequence CACHE
// above 1, for one. The relay checks those settings at its start, and a
// safety net reads the lanes behind their cursors now and then, delivers
// any PENDING event it finds there, logs an ERROR and counts it.
type CursorGuard interface {
	// CheckIDOrder returns an error that says what to change when the
	// outbox's ids may be drawn out of the order of the transactions that
	// draw them. The relay refuses to start on it.
	CheckIDOrder(ctx context.Context) error
	// FoundBehindCursors counts the events the safety net found behind
	// their lane's cursor (and then delivered) since the store was opened.
	FoundBehindCursors() int64
}

// GaugeLeaser elects, among all the processes on one outbox, the one that
// refreshes the cluster-wide gauges (a session advisory lock on
// PostgreSQL, GET_LOCK on MySQL): at most one process holds the lease at a
// time, and it passes to another when the holder's database session ends.
type GaugeLeaser interface {
	// TryGaugeLease takes the lease if no other process holds it. ok is
	// false when another one does; err reports a database failure.
	TryGaugeLease(ctx context.Context) (lease GaugeLease, ok bool, err error)
}

// GaugeLease is a held gauge lease. It keeps a database session of its
// own for as long as it is held.
type GaugeLease interface {
	// Snapshot reads a Snapshot on the lease's session. An error may mean
	// the session, and with it the lease, is gone: Release the lease and
	// try again later.
	Snapshot(ctx context.Context, req SnapshotRequest) (Snapshot, error)
	// Release gives the lease up and closes its session.
	Release()
}

// AdoptionReporter tells whether outbox adopted the table (PostgreSQL,
// MySQL/MariaDB: outbox migrate --adopt).
type AdoptionReporter interface {
	// AdoptedAt returns when outbox adopted the table, on the database's
	// clock, and false when outbox created the table. A purge without
	// [PurgeRequest.Adopted] deletes only rows that finished after it, and
	// a move into the history without [HistoryMoveRequest.Adopted] moves
	// only those.
	AdoptedAt(ctx context.Context) (time.Time, bool, error)
}
