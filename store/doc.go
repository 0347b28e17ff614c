// Package store draws the seam between the relay and a database: the
// [Store] interface and the narrower ones beside it ([RouteStore],
// [AdminQuerier], [Snapshotter], ...), their request and result types with
// their defaults and validation ([PurgeRequest.Normalize],
// [SweepRequest.Normalize], [ClaimRequest.Validate]), table-name
// validation ([TablesFor]), the operator actions' rules ([OperatorChange])
// and the typed errors. The plumbing the backends share (configuration,
// error wrapping, the headers column, sweep and purge pages, status scans)
// lives in the store's internal packages; each backend (store/postgres,
// store/sqlite, store/mysql) keeps its own SQL, implements Store and passes
// the shared conformance suite in store/storetest.
//
// A Store never holds a transaction open across a call back into the relay:
// Claim and Complete are each one short transaction, so no database
// transaction is open while a sink is called.
package store
