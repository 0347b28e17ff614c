// Package mysql is the MySQL and MariaDB backend of the outbox
// (go-sql-driver/mysql): the schema migrations, Enqueue in a caller's
// *sql.Tx, and the [store.Store] the relay uses. It supports MySQL 8.0+ and
// MariaDB 10.6+ (FOR UPDATE SKIP LOCKED, CTEs, window functions).
//
// # Opening
//
// [Open] takes mysql://user:pass@host:3306/db?params (or mariadb://...) or
// the driver's own user:pass@tcp(host:3306)/db?params, and connects with
// [NewConnector]: parseTime=true, loc=UTC, time_zone='+00:00',
// interpolateParams=true, multiStatements=false, utf8mb4, and READ
// COMMITTED on every connection. The application should open the *sql.DB it
// enqueues with the same way:
//
//	connector, err := mysql.NewConnector("mysql://app:secret@db:3306/payments")
//	db := sql.OpenDB(connector)
//	st, err := mysql.New(db, mysql.Config{Table: "payment_outbox"})
//	tx, err := db.BeginTx(ctx, nil)
//	// ... business writes ...
//	ids, err := st.Enqueue(ctx, tx, outbox.Event{...})
//	err = tx.Commit()
//
// [ConfigureDSN] gives the same settings as a DSN string for sql.Open,
// except the isolation level (see its documentation).
//
// # Guarantees
//
// The backend keeps the guarantees of package outbox, with the same state
// machine, claim rules and audit trail as the PostgreSQL backend, and is
// checked by the same conformance suites (store/storetest for the Store
// contract, relay/relaytest for the guarantees through the relay):
//
//   - Atomic: events are rows written in the caller's transaction.
//   - Per-aggregate order: Enqueue locks a row per aggregate (a fixed table
//     of 65536 hash buckets, locked with SELECT ... FOR UPDATE in bucket
//     order) until the caller's transaction ends, so id order is commit
//     order within an aggregate, as PostgreSQL's advisory locks make it.
//     A claim takes an aggregate's events only from its lowest unfinished
//     id, exactly as on PostgreSQL.
//   - Fencing: every change by a relay is guarded by WHERE status = ... AND
//     lock_token = ...; leases, due times and deadlines are computed from
//     the database clock, UTC_TIMESTAMP(6).
//   - Short transactions at READ COMMITTED: the store's own transactions
//     take no gap locks, so they never block the producers' inserts. Claims,
//     sweeps and purges lock with FOR UPDATE SKIP LOCKED.
//   - Deadlocks (1213) and lock wait timeouts (1205) are retried inside the
//     store, the whole transaction again with a growing, jittered delay, up
//     to 10 times; each retry is counted ([Store.Retries]) and logged at
//     DEBUG, and none is reported as an event failure.
//
// # Differences from PostgreSQL
//
//   - No LISTEN/NOTIFY (Features().Listener is nil): relays find new events
//     by polling, plus the in-process nudge after a commit.
//   - No partial indexes: the per-aggregate index leads with a stored
//     generated column, unfinished, which plays the partial index's part.
//   - No UPDATE ... RETURNING, no LATERAL, no data-modifying CTEs: a claim is
//     two reads without locks and one short transaction that locks and
//     changes rows by primary key (six round trips); a completion is one
//     transaction of two to six statements.
//   - The per-aggregate order of producers comes from the row locks of the
//     <table>_aggregates table, which the outbox table's trigger takes for
//     every producer (Enqueue takes them first), as MySQL's GET_LOCK is not
//     transactional.
//   - Timestamps are DATETIME(6) in UTC, to the microsecond, as on
//     PostgreSQL.
//   - Text columns use utf8mb4_bin, so aggregate ids compare byte for byte,
//     except that this collation ignores trailing spaces ('tx-1' and 'tx-1 '
//     are one aggregate to the database).
//   - payload is JSON on MariaDB (LONGTEXT with a JSON_VALID check, stored
//     as given) and LONGTEXT with a JSON_VALID check on MySQL, whose own
//     JSON type would rewrite it: a payload is delivered byte for byte.
package mysql
