package mysql

import (
	"strconv"
	"strings"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/snapshotsql"
)

// queries holds the fixed SQL of the store, with the table names rendered
// in. The statements translate the PostgreSQL backend's
// (store/postgres/queries.go); where PostgreSQL does a step in one
// statement with data-modifying CTEs, LATERAL and RETURNING, which MariaDB
// lacks, the step here is a few statements (reads without locks, then a
// short READ COMMITTED transaction that changes rows by primary key), and
// the choices between them are made in Go (claim.go, complete.go,
// sweep.go). Statements whose text varies (id lists) are built there.
type queries struct {
	window, edfWindow, runs, runsLM       string
	lockClaim, completeLock               string
	reapSelect, expireSelect, expireUpd   string
	blockCandidates, unblockCandidates    string
	countMovable, stats, oldestPending    string
	blockedAg, deadLetterCount, getRecord string
	snapshot                              snapshotsql.Dialect
}

// render replaces {t}, {dl}, {att} with the quoted table names.
func render(t store.Tables, sql string) string {
	return strings.NewReplacer(
		"{t}", "`"+t.Outbox+"`",
		"{dl}", "`"+t.DeadLetters+"`",
		"{att}", "`"+t.Attempts+"`",
	).Replace(sql)
}

func buildQueries(t store.Tables) queries {
	return queries{
		window:            render(t, windowSQL),
		edfWindow:         render(t, edfWindowSQL),
		runs:              render(t, runsSQL),
		runsLM:            render(t, runsLM),
		lockClaim:         render(t, lockClaimSQL),
		completeLock:      render(t, completeLockSQL),
		reapSelect:        render(t, reapSelectSQL),
		expireSelect:      render(t, expireSelectSQL),
		expireUpd:         render(t, expireUpdateSQL),
		blockCandidates:   render(t, blockCandidatesSQL),
		unblockCandidates: render(t, unblockCandidatesSQL),
		countMovable:      render(t, countMovableSQL),
		stats:             render(t, `SELECT status, COUNT(*) FROM {t} GROUP BY status`),
		oldestPending:     render(t, `SELECT TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(6)) FROM {t} WHERE status = 'PENDING'`),
		blockedAg:         render(t, blockedAggregatesSQL),
		deadLetterCount:   render(t, `SELECT COUNT(*) FROM {dl} WHERE requeued_at IS NULL`),
		getRecord:         render(t, `SELECT `+recordColumns+` FROM {t} WHERE event_id = ?`),
		snapshot:          snapshotDialect(t, render(t, blockedAggregatesSQL)),
	}
}

// idList renders ids as a SQL list. They are integers, formatted here, so
// nothing from input reaches the statement text.
func idList(ids []int64) string {
	var b strings.Builder
	b.Grow(len(ids) * 8)
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	return b.String()
}

// windowSQL is the first read of a claim (claimSQL's win in the PostgreSQL
// backend): the first {limit} due PENDING rows in (available_at, id) order,
// from the (status, available_at, id) index, and the database clock.
//
// Unless the claim is strict FIFO, edfWindowSQL adds the {edf} due PENDING
// rows with the nearest deadlines, from the expiry index (earliest deadline
// first; see store.ClaimRequest.FIFOSlots); part tells them apart.
const windowSQL = `
SELECT id, aggregate_type, aggregate_id, available_at, UTC_TIMESTAMP(6), 0 AS part FROM {t}
WHERE status = 'PENDING' AND available_at <= UTC_TIMESTAMP(6)
ORDER BY available_at, id
LIMIT {limit}`

// edfWindowSQL is windowSQL with the deadline part of the window.
const edfWindowSQL = `
(` + windowSQL + `)
UNION ALL
(SELECT id, aggregate_type, aggregate_id, available_at, UTC_TIMESTAMP(6), 1 AS part FROM {t}
WHERE waiting_expires_at IS NOT NULL AND status = 'PENDING' AND available_at <= UTC_TIMESTAMP(6)
ORDER BY waiting_expires_at, id
LIMIT {edf})`

// runsSQL is the second read of a claim (claimSQL's r and held): for each
// aggregate of the window, named by its first window row ({first}), its
// gap: its lowest unfinished row (FAILED counts when {failedBlocks}) that is
// neither in the window ({window}) nor PROCESSING under one of the relay's
// own claims in flight ({notOwn}), as "id,status,available_at". It is the
// first entries of the (aggregate_type, aggregate_id, unfinished, id) index,
// where the window's ids are skipped inside the index and only the other
// rows are read. {ownRows} are the aggregate's first and last rows
// PROCESSING under one of the relay's own claims (from {lm}, the rows in
// flight only), or NULL.
//
// Every row before the gap is a window row or one of the relay's own; so
// the window rows before the gap are the aggregate's run from its head, and
// a gap below both the first window row and the first own row is the head
// itself, which holds the aggregate back (FAILED, or PENDING outside the
// window). A window row before the last own row (given back while a later
// batch is in flight) stops the aggregate. MariaDB has no LATERAL join: the
// correlated subquery plays its part, once per aggregate. The window is
// passed back as literal ids rather than read again in the same statement:
// MariaDB would compute it once per reference, and subqueries over a
// grouped window are several times slower than this.
const runsSQL = `
SELECT w.id,
    (SELECT CONCAT_WS(',', x.id, x.status, x.available_at) FROM {t} x
     WHERE x.aggregate_type = w.aggregate_type AND x.aggregate_id = w.aggregate_id AND x.unfinished = 1
       AND (x.status <> 'FAILED' OR {failedBlocks})
       AND x.id NOT IN ({window}){notOwn}
     ORDER BY x.id LIMIT 1) AS gap,
    {ownRows}
FROM {t} w{lm}
WHERE w.id IN ({first})`

// The parts of runsSQL for a relay with claims in flight; {own} is a list
// of placeholders for their tokens. A PROCESSING row without a token is
// never one of them: without IS NOT NULL, NOT (... IN ...) would be NULL
// for it and skip it, and the aggregate's later rows would pass it.
const (
	runsNotOwn = `
       AND NOT (x.status = 'PROCESSING' AND x.lock_token IS NOT NULL AND x.lock_token IN ({own}))`
	runsLM = `
LEFT JOIN (
    SELECT aggregate_type, aggregate_id, MIN(id) AS first_mine, MAX(id) AS last_mine FROM {t}
    WHERE status = 'PROCESSING' AND lock_token IN ({own})
    GROUP BY aggregate_type, aggregate_id
) lm ON lm.aggregate_type = w.aggregate_type AND lm.aggregate_id = w.aggregate_id`
)

// lockClaimSQL locks the chosen rows that are still PENDING and due, and
// reads them (claimSQL's l): SKIP LOCKED, so a concurrent claim keeps its
// rows and this one never waits. The ids are rendered in (%s); ? is now.
const lockClaimSQL = `
SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, retry_count, created_at, expires_at,
    aggregate_seq
FROM {t} FORCE INDEX (PRIMARY)
WHERE id IN (%s) AND status = 'PENDING' AND available_at <= CAST(? AS DATETIME(6))
ORDER BY id
FOR UPDATE SKIP LOCKED`

// completeLockSQL locks the rows of a completion that are still PROCESSING
// under its claim token, in id order, and reads the database clock. It
// waits (no SKIP LOCKED): a row another transaction holds is decided when
// that one ends.
const completeLockSQL = `
SELECT id, aggregate_type, aggregate_id, UTC_TIMESTAMP(6) FROM {t} FORCE INDEX (PRIMARY)
WHERE id IN (%s) AND status = 'PROCESSING' AND lock_token = ?
ORDER BY id
FOR UPDATE`

// reapSelectSQL locks a page (?) of PROCESSING rows whose lease ended,
// skipping rows another transaction holds, with the claim token they had.
// The PROCESSING range of the due index holds only the rows in flight.
const reapSelectSQL = `
SELECT id, event_id, lock_token, retry_count, locked_until, UTC_TIMESTAMP(6) FROM {t}
WHERE status = 'PROCESSING' AND locked_until < UTC_TIMESTAMP(6)
LIMIT ?
FOR UPDATE SKIP LOCKED`

// expireSelectSQL locks a page (?) of waiting events past their deadline,
// from the expiry index (waiting_expires_at is NULL for other rows).
const expireSelectSQL = `
SELECT id, event_id, retry_count, expires_at, UTC_TIMESTAMP(6) FROM {t}
WHERE waiting_expires_at <= UTC_TIMESTAMP(6) AND status IN ('PENDING', 'BLOCKED')
LIMIT ?
FOR UPDATE SKIP LOCKED`

// expireUpdateSQL ends the locked rows (%s); ? is now. The message names
// the deadline as RFC 3339 UTC to the millisecond, as on PostgreSQL.
const expireUpdateSQL = `
UPDATE {t} FORCE INDEX (PRIMARY) SET status = 'EXPIRED', processed_at = CAST(? AS DATETIME(6)),
    last_error = CONCAT('expired before delivery: deadline was ',
        LEFT(DATE_FORMAT(expires_at, '%%Y-%%m-%%dT%%H:%%i:%%s.%%f'), 23), 'Z')
WHERE id IN (%s)`

// blockCandidatesSQL finds a page (?) of PENDING events that wait behind a
// FAILED event of their aggregate (blockSQL); the sweeper then locks them
// with SKIP LOCKED and moves them to BLOCKED.
const blockCandidatesSQL = `
SELECT o.id FROM {t} o
JOIN (SELECT aggregate_type, aggregate_id, MIN(id) AS id FROM {t} WHERE status = 'FAILED'
      GROUP BY aggregate_type, aggregate_id) f
  ON o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id
WHERE o.unfinished = 1 AND o.status = 'PENDING' AND o.id > f.id
ORDER BY o.id
LIMIT ?`

// unblockCandidatesSQL finds a page (second ?) of BLOCKED events with no
// FAILED event before them, or all of them when FAILED events do not block
// (first ? false).
const unblockCandidatesSQL = `
SELECT o.id FROM {t} o
LEFT JOIN (SELECT aggregate_type, aggregate_id, MIN(id) AS id FROM {t} WHERE status = 'FAILED'
           GROUP BY aggregate_type, aggregate_id) f
  ON ? AND o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id AND f.id < o.id
WHERE o.status = 'BLOCKED' AND f.id IS NULL
ORDER BY o.id
LIMIT ?`

// countMovableSQL counts PROCESSING rows and PENDING rows not held back by
// a FAILED event (when ?): all PENDING rows (a range of the due index, read
// from the index alone), less those behind a FAILED event, found from the
// few FAILED rows through the per-aggregate index.
const countMovableSQL = `
SELECT (SELECT COUNT(*) FROM {t} WHERE status = 'PROCESSING')
     + (SELECT COUNT(*) FROM {t} WHERE status = 'PENDING')
     - (SELECT COUNT(*) FROM (SELECT aggregate_type, aggregate_id, MIN(id) AS id FROM {t} WHERE status = 'FAILED'
                              GROUP BY aggregate_type, aggregate_id) f
        JOIN {t} o ON o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id
          AND o.unfinished = 1 AND o.id > f.id AND o.status = 'PENDING'
        WHERE ?)`

const blockedAggregatesSQL = `
WITH f AS (
    SELECT aggregate_type, aggregate_id, MIN(id) AS id FROM {t} WHERE status = 'FAILED'
    GROUP BY aggregate_type, aggregate_id
),
b AS (
    SELECT f.aggregate_type, f.aggregate_id, (SELECT e.event_id FROM {t} e WHERE e.id = f.id) AS event_id,
        (SELECT COUNT(*) FROM {t} o WHERE o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id
           AND o.unfinished = 1 AND o.id > f.id AND o.status IN ('PENDING', 'BLOCKED')) AS waiting
    FROM f
)
SELECT aggregate_type, aggregate_id, event_id, waiting, COUNT(*) OVER () FROM b
WHERE waiting > 0 ORDER BY aggregate_type, aggregate_id LIMIT 100`

// recordColumns are the columns of a store.Record.
const recordColumns = `id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, status,
    retry_count, created_at, processed_at, available_at, expires_at, locked_until, lock_token, last_error`

// attemptColumns are the columns of an attempt row, in the order
// insertAttempts writes them.
const attemptColumns = "event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, `error`"
