package store

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
)

// Store is the whole contract between the relay, the operator's tools
// and a database: every backend (store/postgres, store/mysql,
// store/sqlite) implements all of it, and store/storetest checks it.
// What only some backends can do is not part of it: [Features] declares
// those capabilities.
//
// Every state change it makes is a compare-and-set on (status, claim token),
// and every lease and due time is computed with the database clock.
type Store interface {
	// --- the relay ---

	// Claim moves up to req.Limit due PENDING events to PROCESSING under a
	// fresh claim token and a lease of req.Lease, in one short transaction.
	// It claims an event only if every earlier unfinished event of its
	// aggregate is claimed in the same call, so that one relay holds an
	// aggregate's next events at a time; events come back in id order.
	Claim(ctx context.Context, req ClaimRequest) (*Claim, error)

	// Complete applies the outcomes of a claim in one transaction: marks,
	// retries, dead letters and attempt rows. A row that is no longer
	// PROCESSING under req.Token is left alone and reported as fenced.
	// Complete is idempotent: replaying it after an ambiguous commit changes
	// nothing more and writes no second attempt row.
	Complete(ctx context.Context, req CompleteRequest) (CompleteResult, error)

	// Sweep is the reaper and housekeeper: it returns PROCESSING rows whose
	// lease ended to PENDING, expires waiting events past their deadline,
	// and keeps BLOCKED in step with FAILED events. It works in pages of
	// req.Limit rows and never waits on a row another transaction holds.
	Sweep(ctx context.Context, req SweepRequest) (SweepResult, error)

	// CountMovable counts events a relay can still move without an
	// operator: PROCESSING ones, and PENDING ones not held back by a FAILED
	// event of their aggregate (when failedBlocks).
	CountMovable(ctx context.Context, failedBlocks bool) (int64, error)

	// Purge deletes final events (and their attempt rows) older than the
	// retention, in batches; it returns how many events it deleted.
	Purge(ctx context.Context, req PurgeRequest) (int64, error)

	// MoveToHistory moves finished events (PROCESSED, EXPIRED, SKIPPED)
	// older than req.OlderThan, with their attempts and their delivery's
	// audit, from the hot table into the history (<table>_history and
	// <table>_attempts_history, kept by month of the event's finish time),
	// one transaction per batch; it returns how many events it moved.
	// History rows are only ever inserted. See docs/HISTORY.md.
	MoveToHistory(ctx context.Context, req HistoryMoveRequest) (int64, error)
	// DropHistoryBefore drops the months of history that end at or before
	// cutoff, whole (never row by row), records each in
	// <table>_history_drops, and returns them with their row counts.
	DropHistoryBefore(ctx context.Context, cutoff time.Time) (HistoryDrop, error)
	// HistoryMonths returns the months the history holds, oldest first,
	// with their row counts (estimates where the backend has them cheap).
	HistoryMonths(ctx context.Context) ([]HistoryMonth, error)

	// Overdue tells a starting relay what passed its deadline while no
	// relay ran: the events still waiting (PENDING, BLOCKED, or PROCESSING
	// under a lease that ended) whose expires_at is behind the database
	// clock. The sweeper or the next claim ends them EXPIRED.
	Overdue(ctx context.Context) (Overdue, error)

	// --- lanes: every aggregate belongs to one lane, and a relay holds a
	// fair share of the lanes under a lease, which it renews while it runs ---

	// BalanceLanes renews the lanes relayID holds through this store and
	// moves it towards its fair share: it gives up lanes others lack and
	// takes free ones. Claim does it too when it is due; a relay also
	// calls it on its own every quarter of the lease (at most every
	// second), so that a relay whose batches are all in flight still
	// renews its lanes and hands some to relays that join.
	BalanceLanes(ctx context.Context, relayID string, lease time.Duration) error
	// ReleaseLanes gives up every lane relayID holds through this store,
	// so that the other relays take them at once rather than when their
	// leases end. A relay calls it when it stops, after its last batch is
	// recorded.
	ReleaseLanes(ctx context.Context, relayID string) error
	// HeldLanes returns the lanes relayID holds through this store, with
	// their lease tokens.
	HeldLanes(relayID string) map[int]int64

	// --- routes: the circuit breaker of every route (a sink plus its
	// routed destination), kept in the database so that every relay on
	// the outbox agrees on it. The state lives in <table>_routes, one row
	// per route that ever changed; every change appends a row to
	// <table>_route_log. A route without a row is CLOSED ---

	// Routes returns every route row and the database clock.
	Routes(ctx context.Context) (RouteSnapshot, error)
	// ChangeRoute applies c only if the route's row is still at
	// c.Version (0 for a route without a row): it writes the new state and
	// an audit row in one transaction and reports whether it applied.
	// Every transition of a breaker goes through it, so that two relays
	// never both move a route (only one takes the probe).
	ChangeRoute(ctx context.Context, c RouteChange) (bool, error)
	// RouteLog returns up to limit audit rows (newest first) of route, or
	// of every route when route is "".
	RouteLog(ctx context.Context, route string, limit int) ([]RouteLogEntry, error)

	// --- fan-out: a destination's own outbox table (see fanout.go) ---

	// CopyEvents copies the rows of the outbox table from (in the same
	// database and schema as this store's table) whose ids are given into
	// this store's table, as new events due now, in id order: each keeps
	// its event id, aggregate, event type, payload, headers, created_at,
	// deadline and compensating event, and starts PENDING with no retry
	// counted; its lane and aggregate sequence are this table's own. A row
	// whose event id this table already holds is not copied again, so a
	// repeated copy adds nothing. Ids not in from are ignored. It returns
	// how many events it wrote.
	CopyEvents(ctx context.Context, from string, ids []int64) (int64, error)
	// EventTypes returns the (event type, aggregate type) pairs of the
	// unfinished events (PENDING, PROCESSING, BLOCKED, FAILED), ordered by
	// event type then aggregate type, with how many events each has.
	EventTypes(ctx context.Context) ([]EventTypes, error)

	// --- payload encryption: the subjects' data keys, wrapped by a
	// key-encryption key the store never sees, in <table>_keys (see
	// keys.go and package encrypt). The first three make the store an
	// encrypt.KeyStore ---

	// CreateDataKey stores k unless the subject has a key of that version;
	// it returns the stored key (the other one when it lost a race).
	CreateDataKey(ctx context.Context, k encrypt.DataKey) (encrypt.DataKey, error)
	// LatestDataKey returns the subject's key of the highest version,
	// shredded or not; ok is false when it has none.
	LatestDataKey(ctx context.Context, subject string) (k encrypt.DataKey, ok bool, err error)
	// DataKeyVersion returns one version of the subject's key; ok is false
	// when there is none.
	DataKeyVersion(ctx context.Context, subject string, version int) (k encrypt.DataKey, ok bool, err error)
	// DataKeys returns up to limit keys after the cursor, in (subject,
	// version) order: what a rotation walks.
	DataKeys(ctx context.Context, after DataKeyCursor, limit int) ([]encrypt.DataKey, error)
	// RewrapDataKey stores k's new wrapping (k.Wrapped, k.KEKID) only if
	// the key is still wrapped by fromKEK and not shredded, and reports
	// whether it did.
	RewrapDataKey(ctx context.Context, k encrypt.DataKey, fromKEK string) (bool, error)
	// SealPending replaces the payloads of rows a producer that does not
	// encrypt wrote in plain with their envelopes, each only while the row
	// is PENDING (a claimed row is; the relay seals what it claims); it
	// refuses a payload that is not an envelope and returns how many rows
	// it changed.
	SealPending(ctx context.Context, rows []SealedPayload) (int64, error)
	// ShredDataKeys deletes the wrapped bytes of every version of a
	// subject's data key, keeping the rows with when, by whom and why; it
	// returns how many versions it shredded (0 when none was left).
	ShredDataKeys(ctx context.Context, s Shred) (int64, error)

	// --- the operator: figures, reads and actions on events ---

	// Stats counts events by status and reports the oldest pending age and
	// the aggregates held back by a FAILED event.
	Stats(ctx context.Context, failedBlocks bool) (Stats, error)
	// Snapshot reads the outbox's figures in one consistent snapshot (a
	// read-only REPEATABLE READ transaction on PostgreSQL and MySQL, one
	// read transaction on SQLite), so that they agree with each other: the
	// FAILED count, the open dead letters and the blocked aggregates are
	// read at the same instant. `outbox status` and the cluster-wide
	// gauges of the metrics package read it.
	Snapshot(ctx context.Context, req SnapshotRequest) (Snapshot, error)

	// ListEvents returns events matching the filter, newest first.
	ListEvents(ctx context.Context, f ListFilter) ([]Record, error)
	// GetEvent returns one event by its id, from the hot table or else
	// from the history (Record.FromHistory), or outbox.ErrNotFound.
	GetEvent(ctx context.Context, id outbox.EventID) (Record, error)
	// Attempts returns the audit trail of one event in attempt order,
	// oldest first within an attempt, from the hot tables or else from
	// the history.
	Attempts(ctx context.Context, id outbox.EventID) ([]Attempt, error)
	// DeadLetters returns dead-letter rows, newest first.
	DeadLetters(ctx context.Context, limit int) ([]DeadLetter, error)

	// Requeue returns a FAILED or EXPIRED event to PENDING (due now),
	// releases the events it held back, and writes an audit row.
	Requeue(ctx context.Context, a OperatorAction) error
	// CountMatching counts the events RequeueMatching would requeue now.
	CountMatching(ctx context.Context, f RequeueFilter) (int64, error)
	// RequeueMatching requeues every event that matches f, each as
	// Requeue does (a.EventID is ignored; the audit row's reason names the
	// filter), and returns how many it requeued.
	RequeueMatching(ctx context.Context, f RequeueFilter, a OperatorAction) (int64, error)
	// Replay returns the delivered (PROCESSED) events that match the
	// request's filter to PENDING, due now, so that they are delivered
	// again with the same event ids, each with an audit row (REPLAYED,
	// the operator and the reason); the earlier delivery stays in the
	// trail and the next one is a new attempt. An aggregate's events are
	// replayed in one transaction, in their original order, ahead of its
	// newer events still waiting; an aggregate with an event PROCESSING,
	// FAILED or BLOCKED is left alone and reported in ReplayResult.Held.
	// A dry run counts the same and changes nothing.
	Replay(ctx context.Context, req ReplayRequest) (ReplayResult, error)
	// Skip moves a FAILED event to SKIPPED so that its aggregate moves on,
	// releases the events it held back, and writes an audit row.
	Skip(ctx context.Context, a OperatorAction) error

	// --- the admin API ---

	// AdminQueries returns the admin API's questions: the event list with
	// every filter, failure groups, blocked chains, bulk selections and
	// relay heartbeats. Every query reads an index or a bounded page; none
	// scans the whole table.
	AdminQueries() AdminQueries
	// AuditChain returns the audit chain's reads and the audit log's
	// writes (store/chain.go). Close it after use.
	AuditChain() AuditChain

	// --- the schema ---

	// MigrateUp applies every pending migration and returns the versions it applied.
	MigrateUp(ctx context.Context) ([]int64, error)
	// MigrateDown reverts every migration: it drops the outbox tables.
	MigrateDown(ctx context.Context) error
	// MigrationVersion returns the applied and the latest known version.
	MigrationVersion(ctx context.Context) (current, latest int64, err error)
	// InspectSchema reads the table's shape and versions. It changes nothing.
	InspectSchema(ctx context.Context) (Schema, error)
	// PlanMigrateUp returns the SQL MigrateUp would run. It changes nothing.
	PlanMigrateUp(ctx context.Context) ([]string, error)
	// PlanMigrateDown returns the SQL MigrateDown would run. It changes nothing.
	PlanMigrateDown(ctx context.Context) ([]string, error)
	// Adopt brings an existing table to the outbox's shape in place, then
	// applies the later migrations. A backend that cannot adopt (SQLite)
	// refuses with outbox.ErrInvalidConfig.
	Adopt(ctx context.Context, o AdoptOptions) (AdoptResult, error)

	// --- the store itself ---

	// Features declares the optional capabilities the store has.
	Features() Features
	// Table returns the outbox table name.
	Table() string
	// Close releases the store's own resources (not a pool the caller passed in).
	Close() error
}

// ClaimRequest asks for a batch of events.
type ClaimRequest struct {
	RelayID string
	Limit   int
	Lease   time.Duration
	// FailedBlocks: a FAILED event holds back the later events of its aggregate.
	FailedBlocks bool
	// Own lists the tokens of this relay's claims still in flight. Their
	// PROCESSING rows do not hold back the later events of their
	// aggregates for this claim: the relay publishes its batches in order
	// and holds back a later event itself if an earlier one fails. Stores
	// without Features.ClaimBehindOwn ignore it (the relay then sends none).
	Own []string
	// StrictFIFO turns earliest-deadline-first off: the claim's window is
	// the first Limit due events in (available_at, id) order alone.
	StrictFIFO bool
	// FIFOShare is the part of Limit (above 0, at most 1) whose window is
	// taken in plain (available_at, id) order; the rest of the window is
	// the due PENDING events with the nearest deadlines. 0 means
	// DefaultFIFOShare. See FIFOSlots.
	FIFOShare float64
}

// DefaultFIFOShare is the part of each claim taken in plain id order when
// earliest-deadline-first is on.
const DefaultFIFOShare = 0.5

// Claim is a batch of events under one claim token.
type Claim struct {
	// Token fences every later change: rows change only while they are
	// PROCESSING under this token.
	Token string
	// DBTime is the database clock when the claim was made; LockedUntil is
	// DBTime plus the lease.
	DBTime      time.Time
	LockedUntil time.Time
	// Events are in id order.
	Events []Claimed
}

// Claimed is one claimed event.
type Claimed struct {
	outbox.Message
	RetryCount int
	// Expired is true when the event was already past its deadline at claim
	// time; the relay must complete it as EXPIRED without sending it.
	Expired bool
}

// OutcomeKind is what happened to one claimed event: the one vocabulary
// of an attempt's outcome, in the relay's Complete requests, the audit
// rows (attempts.outcome), the relay's observer and the metrics' outcome
// label (Label). The event's status follows from it:
//
//	Delivered -> PROCESSED
//	Retry     -> PENDING, retry_count+1, due after RetryIn
//	Failed    -> FAILED, retry_count+1, a dead letter (its aggregate BLOCKED behind it)
//	Expired   -> EXPIRED, never (or no longer) sent
//	Released  -> PENDING (or BLOCKED), retry_count kept, no attempt counted
//	Fenced    -> nothing: the claim's lease was lost, another relay owns the event
type OutcomeKind string

const (
	Delivered OutcomeKind = "DELIVERED"
	Retry     OutcomeKind = "RETRY"
	Failed    OutcomeKind = "FAILED"
	Expired   OutcomeKind = "EXPIRED"
	Released  OutcomeKind = "RELEASED"
	// Fenced is reported by the relay for an outcome Complete did not
	// apply (CompleteResult.Fenced); it is never stored.
	Fenced OutcomeKind = "FENCED"
)

// Label is the kind as a metric label value: "delivered", "retry",
// "failed", "expired", "released", "fenced", ...
func (k OutcomeKind) Label() string { return strings.ToLower(string(k)) }

// Audit outcomes written by the sweeper and by operators, beside the above.
const (
	LeaseExpired OutcomeKind = "LEASE_EXPIRED"
	Requeued     OutcomeKind = "REQUEUED"
	Skipped      OutcomeKind = "SKIPPED"
)

// Outcome is the result for one claimed event.
type Outcome struct {
	ID      int64
	EventID outbox.EventID
	Kind    OutcomeKind
	// Attempt is the attempt number (retry_count+1 at claim).
	Attempt int
	// Error is a short description for last_error and the audit row.
	Error string
	// RetryIn delays the next attempt (Retry, Released): available_at =
	// database now + RetryIn.
	RetryIn time.Duration
	// Block (Released only): hold the event as BLOCKED behind a FAILED one.
	Block bool
	// Attempted: write an attempt row. False for events released without
	// being sent.
	Attempted bool
	// StartedAt and FinishedAt bound the delivery attempt, in the database clock.
	StartedAt, FinishedAt time.Time
	// TraceID is the W3C trace id (32 lowercase hex digits) of the
	// attempt's publish span, or of the producer's traceparent when the
	// relay traces nothing; empty when there is none. It goes in the
	// attempt row.
	TraceID string
	// Receipt is what the destination answered (a sink.Receipt as compact
	// JSON), nil when the sink recorded none. It goes in the attempt row,
	// or on the event row with a delivery recorded there.
	Receipt []byte
}

// CompleteRequest applies the outcomes of one claim.
type CompleteRequest struct {
	Token        string
	RelayID      string
	FailedBlocks bool
	Outcomes     []Outcome
}

// CompleteResult says which rows changed.
type CompleteResult struct {
	// Applied are the ids whose row moved as asked.
	Applied []int64
	// Fenced are the ids whose row was no longer PROCESSING under the
	// token (the lease ended and another relay or the reaper moved it):
	// nothing was changed.
	Fenced []int64
}

// SweepRequest configures one sweep.
type SweepRequest struct {
	RelayID      string
	FailedBlocks bool
	// Limit is the page size; 0 means 1000.
	Limit int
}

// SweepResult counts what one sweep changed.
type SweepResult struct {
	Reaped    int64 // PROCESSING past the lease -> PENDING
	Expired   int64 // PENDING/BLOCKED past expires_at -> EXPIRED
	Blocked   int64 // PENDING behind a FAILED event -> BLOCKED
	Unblocked int64 // BLOCKED with nothing FAILED before it -> PENDING
}

// Stats is a snapshot of the outbox.
type Stats struct {
	Counts map[outbox.Status]int64
	// OldestPendingAge is the database time since the oldest PENDING event
	// was created; 0 when nothing is pending.
	OldestPendingAge time.Duration
	// BlockedAggregates lists up to 100 aggregates held back by a FAILED event.
	BlockedAggregates []BlockedAggregate
	// BlockedAggregateCount counts all of them.
	BlockedAggregateCount int64
	DeadLetters           int64
}

// BlockedAggregate is one aggregate held back by a FAILED event.
type BlockedAggregate struct {
	AggregateType string
	AggregateID   string
	FailedEventID outbox.EventID
	Waiting       int64 // events held back
}

// Record is a full outbox row.
type Record struct {
	ID            int64
	EventID       outbox.EventID
	AggregateType string
	AggregateID   string
	EventType     string
	Payload       json.RawMessage
	Headers       map[string]string
	Status        outbox.Status
	RetryCount    int
	CreatedAt     time.Time
	ProcessedAt   time.Time // zero if not final
	AvailableAt   time.Time
	ExpiresAt     time.Time // zero if none
	LockedUntil   time.Time // zero if not claimed
	LockToken     string
	LastError     string
	// FromHistory: the event was read from the history (it finished and
	// moved out of the hot table).
	FromHistory bool
}

// Attempt is one row of the audit trail.
type Attempt struct {
	Attempt    int
	RelayID    string
	ClaimToken string
	StartedAt  time.Time
	FinishedAt time.Time
	Outcome    OutcomeKind
	Error      string
	// TraceID is the W3C trace id the attempt was sent under (see
	// Outcome.TraceID); empty for sweeper and operator rows.
	TraceID string
	// Receipt is what the destination answered to the attempt (see
	// Outcome.Receipt), nil when none was recorded.
	Receipt json.RawMessage
}

// DeadLetter is one row of the dead-letter table.
type DeadLetter struct {
	ID            int64
	OutboxID      int64
	EventID       outbox.EventID
	AggregateType string
	AggregateID   string
	EventType     string
	RetryCount    int
	Reason        string
	FailedAt      time.Time
	RequeuedAt    time.Time // zero unless requeued
}

// ListFilter selects events for ListEvents.
type ListFilter struct {
	Status        outbox.Status // empty: any
	AggregateType string
	AggregateID   string
	// BeforeID pages backwards: only rows with id < BeforeID (0: no bound).
	BeforeID int64
	// Limit defaults to 50 and is capped at 1000.
	Limit int
}

// OperatorAction identifies an operator's change to one event.
type OperatorAction struct {
	EventID outbox.EventID
	// Actor names who acted (user name, token name); it goes in the audit row.
	Actor  string
	Reason string
	// NewTTL (Requeue only) gives the event a new deadline, measured from
	// now with the database clock. Without it, a deadline that has passed is
	// removed, since the operator asked for the event to be sent.
	NewTTL time.Duration
}

// PurgeRequest deletes final events older than OlderThan.
type PurgeRequest struct {
	OlderThan time.Duration
	// Statuses to purge; empty means PROCESSED and EXPIRED. FAILED and
	// SKIPPED rows are kept unless named here.
	Statuses []outbox.Status
	// BatchSize rows per transaction; 0 means 1000.
	BatchSize int
	// Adopted also deletes, on a table that outbox adopted (outbox migrate
	// --adopt), the rows that finished before the adoption: the team's
	// history, which a purge keeps by default since no relay finished them.
	Adopted bool
}

// Normalize fills defaults in l.
func (f ListFilter) Normalize() ListFilter {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	if f.Limit > 1000 {
		f.Limit = 1000
	}
	return f
}

// TraceIDOf returns the trace id of a W3C traceparent header value
// ("00-<32 hex trace id>-<16 hex span id>-<2 hex flags>"), or "" when the
// value is missing or malformed or the trace id is all zeros.
func TraceIDOf(headers map[string]string) string {
	tp := headers["traceparent"]
	if len(tp) < 55 || tp[2] != '-' || tp[35] != '-' {
		return ""
	}
	id := tp[3:35]
	zero := true
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		default:
			return ""
		}
		if c != '0' {
			zero = false
		}
	}
	if zero {
		return ""
	}
	return id
}

// LaneBalanceInterval is how often a relay renews and balances its lanes
// for a lease: a quarter of it, at most every second.
func LaneBalanceInterval(lease time.Duration) time.Duration {
	return max(min(lease/4, time.Second), time.Millisecond)
}
