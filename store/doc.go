// Package store draws the seam between the relay and a database. It is
// one interface and one declaration:
//
//   - [Store] is everything every backend does, grouped by role: the
//     relay's claims, completions, sweeps, purges and moves into the
//     history (docs/HISTORY.md); the lanes; the
//     routes' circuit breakers; the operator's reads and actions and the
//     admin API's queries ([AdminQueries]); the schema's migrations,
//     checks and adoption.
//   - [Features], returned by Store.Features, declares what only some
//     backends can do: SKIP LOCKED, claims behind the relay's own batches,
//     and the capabilities [Listener], [EnqueueObserver], [CursorGuard],
//     [GaugeLeaser] and [AdoptionReporter], each nil when the backend
//     lacks it. Callers read them there; nothing discovers them by type
//     assertion.
//
// Beside them are the request and result types with their defaults and
// validation ([PurgeRequest.Normalize], [HistoryMoveRequest.Normalize],
// [SweepRequest.Normalize],
// [ClaimRequest.Validate]), table-name validation ([TablesFor]), the
// operator actions' rules ([OperatorChange]) and the typed errors. The
// plumbing the backends share (configuration, error wrapping, the headers
// column, filters, sweep and purge pages, status scans, text limits) lives
// in internal packages; each backend (store/postgres, store/sqlite,
// store/mysql) keeps its own SQL, implements Store, declares its Features
// and passes the shared conformance suite in store/storetest, which checks
// the declaration too.
//
// A Store never holds a transaction open across a call back into the relay:
// Claim and Complete are each one short transaction, so no database
// transaction is open while a sink is called.
package store
