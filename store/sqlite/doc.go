// Package sqlite is the SQLite backend of the outbox, the embedded default:
// the schema migrations, Enqueue in a caller's *sql.Tx, and the
// [store.Store] the relay uses. It uses modernc.org/sqlite (pure Go, no cgo,
// driver name "sqlite").
//
// # Opening
//
// [Open] takes sqlite:///absolute/path.db, sqlite://relative/path.db or a
// plain file path and opens the file with the DSN that [DSN] returns:
// journal_mode=WAL, busy_timeout=10000, foreign_keys=on, synchronous=NORMAL
// and _txlock=immediate. The application should open its own *sql.DB on the
// same file the same way:
//
//	db, err := sql.Open("sqlite", sqlite.DSN("/var/lib/app/app.db"))
//	st, err := sqlite.New(db, sqlite.Config{})
//	tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE
//	// ... business writes ...
//	ids, err := st.Enqueue(ctx, tx, outbox.Event{...})
//	err = tx.Commit()
//
// [New] accepts any *sql.DB of the "sqlite" driver and leaves it open on
// Close. The store's own writes do not depend on the DSN (each is an explicit
// BEGIN IMMEDIATE on a connection of its own), but the application's do:
// without busy_timeout two writers fail with SQLITE_BUSY instead of waiting,
// without _txlock=immediate a transaction that reads before it writes can
// fail at its first write, and without WAL every reader blocks the writer.
//
// # Guarantees
//
// The backend keeps the guarantees of package outbox, with the same schema,
// state machine, claim rules and audit trail as the PostgreSQL backend (its
// statements are translations of that backend's), and is checked by the same
// conformance suites (store/storetest for the Store contract, relay/relaytest
// for the guarantees through the relay):
//
//   - Atomic: events are rows written in the caller's transaction.
//   - Per-aggregate order: SQLite has one writer at a time and assigns ids at
//     insert, so id order is commit order (PostgreSQL needs an advisory lock
//     per aggregate for that). A claim takes an aggregate's events only from
//     its lowest unfinished id, exactly as on PostgreSQL.
//   - Fencing: every change by a relay is guarded by WHERE status = ... AND
//     lock_token = ...; leases, due times and deadlines are computed with
//     SQLite's clock (strftime('now')), read once per transaction.
//   - Short transactions: Claim, Complete, every page of Sweep and Purge, and
//     each operator action is one BEGIN IMMEDIATE transaction that makes no
//     call outside the database. SQLITE_BUSY and SQLITE_LOCKED are retried a
//     few times with a growing, jittered delay. Within one process, the
//     stores on one file queue for the write lock in FIFO order, so that
//     several relays share the work instead of one of them winning every
//     race for SQLite's lock. A relay renewing or balancing its lanes gives
//     way to a busy lock (it keeps the lanes it holds, or its claim comes
//     back empty) for one and a half balance intervals at most, then waits
//     for the lock: a lock that is seldom free never keeps relays from
//     their lanes.
//   - ids are INTEGER PRIMARY KEY AUTOINCREMENT: never reused, even after a
//     purge deleted the newest rows.
//
// # Differences from PostgreSQL
//
//   - One writer. Claims, completions, sweeps and producers' transactions
//     take turns on SQLite's single write lock instead of skipping each
//     other's rows (Features().SkipLocked is false). Several relays may run
//     against one file, on one machine; they serialize on that lock, so more
//     relays add availability, not throughput. An idle poll only reads.
//     The application's transactions wait for the lock in SQLite's busy
//     handler, which polls while the relays' writers hand it on to each
//     other: with a backlog draining on a slow machine, a BEGIN can wait
//     out busy_timeout and fail with SQLITE_BUSY. Nothing of such a
//     transaction was committed; retry it as a whole.
//   - No LISTEN/NOTIFY (Features().Listener is nil): relays find new events
//     by polling, plus the in-process nudge after a commit.
//   - Timestamps are stored as UTC text 'YYYY-MM-DD HH:MM:SS.SSS': to the
//     millisecond (PostgreSQL keeps microseconds). Durations (TTL, delay,
//     lease, backoff, retention) are rounded to the millisecond, and times
//     read back are in UTC.
//   - Types are SQLite's: event ids and claim tokens are UUID text, payload
//     and headers are JSON text checked by json_valid; a payload is stored and
//     delivered byte for byte.
//   - Attempt rows whose StartedAt or FinishedAt is zero get the database's
//     now (PostgreSQL would store year 1).
package sqlite
