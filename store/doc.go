// Package store draws the seam between the relay and a database: the
// [Store] interface, its request and result types, and helpers shared by the
// backends: identifier validation, request defaults and validation
// ([PurgeRequest.Normalize], [SweepRequest.Normalize],
// [ClaimRequest.Validate]), the operator actions' rules and audit text
// ([OperatorChange]), the Go side of Stats, ListEvents, Sweep and Purge
// ([NewStats], [ListFilter.Where], [RunSweep], [PurgePages]), the headers
// column ([EncodeHeaders], [DecodeHeaders]) and error wrapping
// ([WrapError]). The backends keep their own SQL. Each backend
// (store/postgres, store/sqlite, store/mysql) implements Store and passes
// the shared conformance suite in store/storetest.
//
// A Store never holds a transaction open across a call back into the relay:
// Claim and Complete are each one short transaction, so no database
// transaction is open while a sink is called.
package store
