package sqlite

import (
	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store"
)

// queries holds the SQL of the hot path, with the table names rendered in.
// The statements are translations of the PostgreSQL backend's (see
// store/postgres/queries.go); SQLite has one writer at a time, so where
// PostgreSQL locks rows with SKIP LOCKED, these run inside a BEGIN IMMEDIATE
// transaction that already excludes every other writer. "now" is always a
// parameter: the database clock read once at the start of the transaction.
type queries struct {
	claimRead, claimsOf, laneLeases               string
	claimEvents, insertClaim                      string
	claimDefer, claimBlock                        string
	claimDelete, deadClaimRows                    string
	allClaims                                     string
	complete                                      completeSQL
	reapSelect, reapUpdate, audit                 string
	expire, block, unblock                        string
	countMovable, stats, oldestPending, blockedAg string
	deadLetterCount                               string

	// The operator's statements (admin.go). listEvents, countMatching and
	// selectMatching are the fixed heads of statements whose WHERE is
	// written from a filter's fixed fragments and bind parameters.
	listEvents, getEvent, attempts, deadLetters string
	operatorLock, operatorRequeue               string
	operatorRequeueDead, operatorSetStatus      string
	operatorUnblock                             string
	moveDelivery, clearDelivery                 string
	countMatching, selectMatching               string

	// enqueueHead is the fixed head of the multi-row insert (enqueue.go),
	// whose VALUES rows are written per call from placeholders and fixed
	// expressions; eventExists tells whether event ? exists.
	enqueueHead, eventExists string

	// countUnfinished counts the events not yet finished, for the schema
	// inspection (migrate.go).
	countUnfinished string
}

// names is what the statements are rendered with: the table names, and
// TS, the strftime format of stored timestamps (a fixed fragment).
type names struct {
	store.Tables
	TS string
}

// render renders a statement, a template of internal/sqltext (the syntax
// of the migrations): {{.Outbox}}, {{.DeadLetters}} and {{.Attempts}}
// between double quotes are the tables, {{.TS}} the timestamp format.
func render(t store.Tables, sql string) string {
	return sqltext.MustRender(sql, names{Tables: t, TS: tsSQL})
}

func buildQueries(t store.Tables) queries {
	return queries{
		claimRead:       render(t, claimReadSQL),
		claimsOf:        render(t, claimsOfSQL),
		laneLeases:      render(t, laneLeasesSQL),
		claimEvents:     render(t, claimEventsSQL),
		insertClaim:     render(t, insertClaimSQL),
		claimDefer:      render(t, claimDeferSQL),
		claimBlock:      render(t, claimBlockSQL),
		claimDelete:     render(t, `DELETE FROM "{{.Outbox}}_claims" WHERE token = ?`),
		complete:        buildCompleteSQL(t),
		allClaims:       render(t, `SELECT token, lanes, lane_tokens, ids FROM "{{.Outbox}}_claims" ORDER BY created_ms LIMIT ?`),
		deadClaimRows:   render(t, `SELECT id, event_id, retry_count FROM "{{.Outbox}}" WHERE id IN (SELECT value FROM json_each(?))`),
		reapSelect:      render(t, reapSelectSQL),
		reapUpdate:      render(t, reapUpdateSQL),
		audit:           render(t, auditSQL),
		expire:          render(t, expireSQL),
		block:           render(t, blockSQL),
		unblock:         render(t, unblockSQL),
		countMovable:    render(t, countMovableSQL),
		stats:           render(t, statsSQL),
		oldestPending:   render(t, `SELECT min(created_at) FROM "{{.Outbox}}" WHERE status = 'PENDING'`),
		blockedAg:       render(t, blockedAggregatesSQL),
		deadLetterCount: render(t, `SELECT count(*) FROM "{{.DeadLetters}}" WHERE requeued_at IS NULL`),

		listEvents:          render(t, `SELECT `+recordColumns+recordFrom),
		getEvent:            render(t, `SELECT `+recordColumns+recordFrom+` WHERE o.event_id = ?`),
		attempts:            render(t, attemptsSQL),
		deadLetters:         render(t, deadLettersSQL),
		operatorLock:        render(t, operatorLockSQL),
		operatorRequeue:     render(t, operatorRequeueSQL),
		operatorRequeueDead: render(t, `UPDATE "{{.DeadLetters}}" SET requeued_at = ? WHERE outbox_id = ? AND requeued_at IS NULL`),
		operatorSetStatus:   render(t, `UPDATE "{{.Outbox}}" SET status = ? WHERE id = ?`),
		operatorUnblock:     render(t, operatorUnblockSQL),
		moveDelivery:        render(t, moveDeliverySQL),
		clearDelivery:       render(t, clearDeliverySQL),
		countMatching:       render(t, `SELECT count(*) FROM "{{.Outbox}}" WHERE `),
		selectMatching:      render(t, `SELECT id, event_id FROM "{{.Outbox}}" WHERE `),
		enqueueHead:         render(t, `INSERT INTO "{{.Outbox}}" (event_id, aggregate_type, aggregate_id, event_type, payload, headers, on_expired, expires_at, available_at) VALUES `),
		eventExists:         render(t, `SELECT EXISTS (SELECT 1 FROM "{{.Outbox}}" WHERE event_id = ?)`),
		countUnfinished:     render(t, `SELECT count(*) FROM "{{.Outbox}}" WHERE status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED')`),
	}
}

// statsSQL counts the rows by status, a PENDING row that a claim holds as
// PROCESSING.
const statsSQL = `
SELECT CASE WHEN o.status = 'PENDING' AND o.id IN (` + busySQL + `) THEN 'PROCESSING' ELSE o.status END, count(*)
FROM "{{.Outbox}}" o GROUP BY 1`

// operatorLockSQL reads the row of event ? for an operator action, with
// its status (PROCESSING while a claim holds it).
const operatorLockSQL = `SELECT id, CASE WHEN status = 'PENDING' AND id IN (` + busySQL + `) THEN 'PROCESSING' ELSE status END,
        retry_count, aggregate_type, aggregate_id, event_id FROM "{{.Outbox}}" WHERE event_id = ?`

// attemptsSQL lists the audit trail of event ?1, in the order the attempts
// finished: its rows in the attempts table and the delivery recorded on
// the event row (migration 00006).
const attemptsSQL = `SELECT attempt, relay_id, claim_token, started_at, finished_at, outcome, COALESCE(error, ''), COALESCE(trace_id, '')
        FROM "{{.Attempts}}" WHERE event_id = ?1
        UNION ALL
        SELECT delivered_attempt, delivered_relay_id, COALESCE(delivered_token, ''), delivered_started_at, delivered_finished_at,
            'DELIVERED', '', COALESCE(delivered_trace_id, '')
        FROM "{{.Outbox}}" WHERE event_id = ?1 AND delivered_relay_id IS NOT NULL
        ORDER BY 1, 5, 4`

// moveDeliverySQL copies the delivery recorded on row ?1, if any, into the
// attempts table, and clearDeliverySQL clears it from the row, before an
// operator action changes the row: a second delivery then overwrites
// nothing.
const moveDeliverySQL = `
INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, trace_id)
SELECT event_id, COALESCE(delivered_token, lower(hex(randomblob(16)))), 'DELIVERED', id, COALESCE(delivered_attempt, 0),
    delivered_relay_id, COALESCE(delivered_started_at, delivered_finished_at), delivered_finished_at, delivered_trace_id
FROM "{{.Outbox}}" WHERE id = ?1 AND delivered_relay_id IS NOT NULL
ON CONFLICT DO NOTHING`

const clearDeliverySQL = `
UPDATE "{{.Outbox}}" SET delivered_relay_id = NULL, delivered_attempt = NULL, delivered_started_at = NULL,
    delivered_finished_at = NULL, delivered_trace_id = NULL, delivered_token = NULL
WHERE id = ?1 AND delivered_relay_id IS NOT NULL`

// deadLettersSQL lists the dead letters, newest first, at most ?.
const deadLettersSQL = `SELECT id, outbox_id, event_id, aggregate_type, aggregate_id, event_type, retry_count,
        reason, failed_at, requeued_at FROM "{{.DeadLetters}}" ORDER BY id DESC LIMIT ?`

// operatorRequeueSQL gives row ?1 a fresh chance at ?2 (now); ?3, when not
// NULL, is a new deadline as a strftime modifier from now, and a passed
// deadline is removed otherwise.
const operatorRequeueSQL = `UPDATE "{{.Outbox}}" SET status = 'PENDING', available_at = ?2, processed_at = NULL,
                locked_until = NULL, lock_token = NULL,
                expires_at = CASE WHEN ?3 IS NOT NULL THEN strftime({{.TS}}, ?2, ?3)
                                  WHEN expires_at <= ?2 THEN NULL ELSE expires_at END
                WHERE id = ?1`

// operatorUnblockSQL releases the BLOCKED events of aggregate (?1, ?2)
// that no earlier FAILED event of the aggregate still holds back.
const operatorUnblockSQL = `UPDATE "{{.Outbox}}" SET status = 'PENDING'
            WHERE aggregate_type = ?1 AND aggregate_id = ?2 AND status = 'BLOCKED'
              AND NOT EXISTS (SELECT 1 FROM "{{.Outbox}}" f WHERE f.status = 'FAILED'
                  AND f.aggregate_type = ?1 AND f.aggregate_id = ?2 AND f.id < "{{.Outbox}}".id)`

// waitingWithDeadline repeats the WHERE clause of the expiry index, which
// the claim's deadline part reads in (expires_at, id) order (see
// unfinished). The part names the index (INDEXED BY): without statistics
// SQLite would rather read every due row through the pending index and
// sort them, the whole backlog on every claim.
const waitingWithDeadline = `status IN ('PENDING', 'BLOCKED') AND expires_at IS NOT NULL`

// claimDeferSQL gives the PENDING rows of ?1 (JSON ids, rows behind a head
// in backoff) the head's available_at ?2, so that they leave the window.
const claimDeferSQL = `
UPDATE "{{.Outbox}}" SET available_at = ?2
WHERE id IN (SELECT value FROM json_each(?1)) AND status = 'PENDING' AND available_at < ?2`

// claimBlockSQL marks the PENDING rows of ?1 (JSON ids, rows behind a FAILED
// head) BLOCKED.
const claimBlockSQL = `
UPDATE "{{.Outbox}}" SET status = 'BLOCKED'
WHERE id IN (SELECT value FROM json_each(?1)) AND status = 'PENDING'`

// busySQL lists the rows the claims in flight hold (PROCESSING).
const busySQL = `SELECT j.value FROM "{{.Outbox}}_claims" bc, json_each(bc.ids) j`

// unfinished repeats the WHERE clause of the aggregate index: SQLite uses a
// partial index only when the query names its condition, and does not infer
// it from status = 'PENDING'.
const unfinished = `status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED')`

// reapSelectSQL finds a page of PROCESSING rows whose lease ended (?1 now,
// ?2 page size), with the claim token they had.
const reapSelectSQL = `
SELECT id, event_id, lock_token, retry_count, replace(locked_until, ' ', 'T') || 'Z' FROM "{{.Outbox}}"
WHERE status = 'PROCESSING' AND locked_until < ?1
ORDER BY id LIMIT ?2`

// reapUpdateSQL returns the rows of ?1 (JSON ids) to PENDING, keeping retry_count.
const reapUpdateSQL = `
UPDATE "{{.Outbox}}" SET status = 'PENDING', locked_until = NULL, lock_token = NULL
WHERE id IN (SELECT value FROM json_each(?1)) AND status = 'PROCESSING'`

// auditSQL writes one attempt row at now (?7) for the sweeper; a replay
// writes nothing.
const auditSQL = `
INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8)
ON CONFLICT DO NOTHING`

// expireSQL ends a page (?2) of waiting events past their deadline (?1 now).
const expireSQL = `
UPDATE "{{.Outbox}}" SET status = 'EXPIRED', processed_at = ?1,
    last_error = 'expired before delivery: deadline was ' || replace(expires_at, ' ', 'T') || 'Z'
WHERE id IN (
    SELECT id FROM "{{.Outbox}}"
    WHERE status IN ('PENDING', 'BLOCKED') AND expires_at IS NOT NULL AND expires_at <= ?1
      AND id NOT IN (` + busySQL + `)
    ORDER BY expires_at LIMIT ?2)
RETURNING id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, expires_at, retry_count, on_expired, last_error`

// blockSQL moves a page (?1) of PENDING events that wait behind a FAILED
// event of their aggregate to BLOCKED.
const blockSQL = `
UPDATE "{{.Outbox}}" SET status = 'BLOCKED'
WHERE id IN (
    SELECT o.id FROM "{{.Outbox}}" o
    JOIN (SELECT aggregate_type, aggregate_id, min(id) AS id FROM "{{.Outbox}}" WHERE status = 'FAILED'
          GROUP BY aggregate_type, aggregate_id) f
      ON f.aggregate_type = o.aggregate_type AND f.aggregate_id = o.aggregate_id
    WHERE o.status = 'PENDING' AND o.` + unfinished + ` AND o.id > f.id AND o.id NOT IN (` + busySQL + `)
    ORDER BY o.id LIMIT ?1)`

// unblockSQL returns a page (?1) of BLOCKED events with no FAILED event
// before them (or all of them when FAILED events do not block, ?2 false) to
// PENDING.
const unblockSQL = `
UPDATE "{{.Outbox}}" SET status = 'PENDING'
WHERE id IN (
    SELECT o.id FROM "{{.Outbox}}" o
    WHERE o.status = 'BLOCKED' AND (NOT ?2 OR NOT EXISTS (
        SELECT 1 FROM "{{.Outbox}}" f WHERE f.status = 'FAILED'
          AND f.aggregate_type = o.aggregate_type AND f.aggregate_id = o.aggregate_id AND f.id < o.id))
    ORDER BY o.id LIMIT ?1)`

// countMovableSQL counts PROCESSING rows and PENDING rows not held back by
// a FAILED event (when ?1), as two counts so that each reads its partial
// index instead of the whole table.
const countMovableSQL = `
SELECT (SELECT count(*) FROM "{{.Outbox}}" WHERE status = 'PROCESSING')
     + (SELECT count(*) FROM "{{.Outbox}}" o WHERE o.status = 'PENDING' AND NOT (?1 AND EXISTS (
          SELECT 1 FROM "{{.Outbox}}" f WHERE f.status = 'FAILED'
            AND f.aggregate_type = o.aggregate_type AND f.aggregate_id = o.aggregate_id AND f.id < o.id)))`

const blockedAggregatesSQL = `
WITH f AS (
    SELECT aggregate_type, aggregate_id, min(id) AS id FROM "{{.Outbox}}" WHERE status = 'FAILED'
    GROUP BY aggregate_type, aggregate_id
),
b AS (
    SELECT f.aggregate_type, f.aggregate_id, (SELECT e.event_id FROM "{{.Outbox}}" e WHERE e.id = f.id) AS event_id,
        (SELECT count(*) FROM "{{.Outbox}}" o WHERE o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id
           AND o.id > f.id AND o.status IN ('PENDING', 'BLOCKED') AND o.` + unfinished + `) AS waiting
    FROM f
)
SELECT aggregate_type, aggregate_id, event_id, waiting, count(*) OVER () FROM b
WHERE waiting > 0 ORDER BY aggregate_type, aggregate_id LIMIT 100`
