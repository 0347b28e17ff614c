// Package inbox is the consumer's half of the outbox: it turns
// at-least-once delivery into effects that happen once.
//
// The relay delivers every event at least once. After a crash, an ended
// lease or a lost acknowledgement it delivers an event again, with the
// same event id; an operator who requeues a dead letter does the same,
// days later. A consumer that charges a card per delivery charges it
// twice. The inbox records, per consumer, the event ids it has handled,
// in the consumer's own database transaction, the one that writes the
// business effect:
//
//	tx, _ := db.BeginTx(ctx, nil)
//	defer tx.Rollback()
//	res, err := ib.Handle(ctx, tx, "card-charger", eventID, func(ctx context.Context) error {
//		_, err := tx.ExecContext(ctx, `INSERT INTO charges ...`)
//		return err
//	})
//	if err != nil { return err }         // roll back: the event is handled again when redelivered
//	return tx.Commit()                   // res is inbox.Processed, or inbox.Duplicate (fn did not run)
//
// It works on PostgreSQL (database/sql, or pgx through package inboxpgx),
// MySQL 8 / MariaDB 10.6+ and SQLite (modernc). Adapters take the event id,
// the aggregate and its sequence from what the relay's sinks send:
// FromRequest (HTTP), inboxkafka, inboxnats, inboxamqp, inboxredis; each
// broker adapter is its own package, so that this one imports no broker
// client and no database driver. Middleware does the same for an HTTP
// handler and replays the first response to a repeated Idempotency-Key.
//
// # Guarantees
//
// Each has tests that fail if it breaks, on the real databases.
//
//  1. Once per consumer. Among the transactions that commit, fn's
//     effects for one (consumer, event id) are committed at most once;
//     with at-least-once delivery, exactly once. Ids are compared byte for
//     byte. Two consumers (two names) each handle an event once.
//  2. Atomic with the effect. The record is written in the caller's
//     transaction: it commits with fn's effects or rolls back with them,
//     and a rolled-back event is handled again when it is redelivered.
//     Handle never commits or rolls back.
//  3. Concurrent deliveries. Two transactions that handle one event at
//     once: exactly one runs fn. The second waits for the first and then
//     reports Duplicate if the first committed, or runs fn if it rolled
//     back. How it waits depends on the database: see below.
//  4. Nothing without an id. A message without an event id (or with an
//     invalid one, or an empty consumer name) gets an error matching
//     ErrInvalidMessage (ErrNoEventID for a missing id), and nothing is
//     recorded or run. A missing inbox table gives ErrNotMigrated, which
//     names MigrateUp.
//  5. Sequences are checked, not enforced. The producer numbers each
//     aggregate's events 1, 2, 3 ... without gaps (outbox-aggregate-seq).
//     When a message carries its sequence, the inbox keeps the highest
//     seen per consumer and aggregate, in the same transaction, and
//     reports a gap (a number skipped) or a reordering (a number not above
//     the highest) through Config.OnSequence, a WARN log line and Stats.
//     Duplicates are dropped before and are neither. The message is
//     handled either way.
//
// # Concurrent deliveries
//
//   - PostgreSQL: the second waits on the first's uncommitted key (INSERT
//     ... ON CONFLICT DO NOTHING). At READ COMMITTED (the default) it then
//     reports Duplicate. At REPEATABLE READ or SERIALIZABLE it gets a
//     serialization failure (SQLSTATE 40001) instead: retry the
//     transaction, it then reports Duplicate.
//   - MySQL/MariaDB (InnoDB): the second waits on the duplicate key's lock
//     (INSERT IGNORE) for at most innodb_lock_wait_timeout (50 s by
//     default, then error 1205), and then reports Duplicate at any
//     isolation level. When three or more wait and the first rolls back,
//     InnoDB may end one of them as a deadlock victim (error 1213): retry
//     it.
//   - SQLite: one writer at a time. With BEGIN IMMEDIATE transactions
//     (store/sqlite.DSN sets _txlock=immediate) the second waits for the
//     write lock (busy_timeout), then reports Duplicate. A deferred
//     transaction that has already read may get SQLITE_BUSY instead: retry
//     it.
//
// A message that carries a sequence also locks its aggregate's sequence
// row until the transaction ends, so the consumers of one aggregate are
// serialized from their Handle to their commit.
//
// What it cannot do: make an effect outside the transaction happen once.
// A call to a card processor's API inside fn is repeated when the
// transaction rolls back; pass the event id to that API as its own
// idempotency key.
//
// # Retention
//
// Ids are kept Config.Retention (30 days by default) and deleted by
// Cleanup, in pages. An id must outlive every redelivery of its event:
// see DefaultRetention for the reasoning.
package inbox
