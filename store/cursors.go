package store

import "context"

// CursorGuard is implemented by the stores whose lanes read from id
// cursors (PostgreSQL): a claim reads a lane's events from the first id
// not yet finished on, and never looks behind it again. That is safe only
// while ids become visible in order, which the database's settings can
// break: a sequence CACHE above 1, for one. The relay checks those
// settings at its start, and a safety net reads the lanes behind their
// cursors now and then, delivers any PENDING event it finds there, logs an
// ERROR and counts it.
type CursorGuard interface {
	// CheckIDOrder returns an error that says what to change when the
	// outbox's ids may be drawn out of the order of the transactions that
	// draw them. The relay refuses to start on it.
	CheckIDOrder(ctx context.Context) error
	// FoundBehindCursors counts the events the safety net found behind
	// their lane's cursor (and then delivered) since the store was opened.
	FoundBehindCursors() int64
}
