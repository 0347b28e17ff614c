// Package postgres is the PostgreSQL backend of the outbox (pgx v5): the
// schema migrations, Enqueue in a caller's pgx.Tx or *sql.Tx, and the
// [store.Store] the relay uses.
//
// Relays lease lanes (store/internal/lanes), so any number of them can run
// against one database; all lease and due-time arithmetic uses the
// database clock.
package postgres
