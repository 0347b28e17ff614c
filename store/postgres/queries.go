package postgres

import (
	"strconv"

	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/snapshotsql"
)

// queries holds the SQL of the store. Every statement is a template of
// internal/sqltext, the syntax of the migrations: the table names are
// {{.Outbox}}, {{.DeadLetters}} and {{.Attempts}} between double quotes,
// rendered once when the store is built; every value is a bind parameter.
type queries struct {
	readClaim, readClaimIDs, claims, commitClaim  string
	complete                                      completeSQL
	reap, reapClaims, expire, block, unblock      string
	countMovable, stats, oldestPending, blockedAg string
	deadLetterCount                               string
	purge, purgeDeliveries, overdue, missingIDs   string
	attempts, moveDelivery                        string
	idOrder, scanBehind                           string
	snapshot                                      snapshotsql.Dialect

	// The operator's statements (admin.go). listEvents, countMatching and
	// selectMatching are the fixed heads of statements whose WHERE is
	// written from a filter's fixed fragments and bind parameters.
	listEvents, getEvent, deadLetters      string
	operatorLock, operatorRequeue          string
	operatorRequeueDead, operatorSetStatus string
	operatorAudit, operatorUnblock         string
	countMatching, selectMatching          string

	// enqueueHead is the fixed head of the multi-row insert (enqueue.go),
	// whose VALUES list is written per call from placeholders and casts.
	enqueueHead                         string
	existingEvents, compensatedAttempts string
	// outboxName is the quoted outbox table as a regclass text, a bind
	// parameter of the analyze check; analyze analyzes the table.
	outboxName, analyze string
}

// render renders a statement with the table names.
func render(t store.Tables, sql string) string { return sqltext.MustRender(sql, t) }

// placeholder renders the n-th bind parameter, from 1.
func placeholder(n int) string { return "$" + strconv.Itoa(n) }

func buildQueries(t store.Tables) queries {
	return queries{
		readClaim:       render(t, readClaimSQL),
		readClaimIDs:    render(t, readClaimIDsSQL),
		claims:          render(t, claimsSQL),
		idOrder:         render(t, idOrderSQL),
		scanBehind:      render(t, scanBehindSQL),
		commitClaim:     render(t, commitClaimSQL),
		reapClaims:      render(t, reapClaimsSQL),
		complete:        buildCompleteSQL(t),
		reap:            render(t, reapSQL),
		expire:          render(t, expireSQL),
		block:           render(t, blockSQL),
		unblock:         render(t, unblockSQL),
		countMovable:    render(t, countMovableSQL),
		stats:           render(t, statsSQL),
		oldestPending:   render(t, `SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8 FROM "{{.Outbox}}" WHERE status = 'PENDING'`),
		blockedAg:       render(t, blockedAggregatesSQL),
		deadLetterCount: render(t, `SELECT count(*) FROM "{{.DeadLetters}}" WHERE requeued_at IS NULL`),
		purge:           render(t, purgeSQL),
		purgeDeliveries: render(t, purgeDeliveriesSQL),
		attempts:        render(t, attemptsSQL),
		moveDelivery:    render(t, moveDeliverySQL),
		overdue:         render(t, overdueSQL),
		missingIDs:      render(t, missingIDsSQL),
		snapshot:        snapshotDialect(t, render(t, blockedAggregatesSQL)),

		listEvents:          render(t, `SELECT `+recordColumns+recordFrom),
		getEvent:            render(t, `SELECT `+recordColumns+recordFrom+` WHERE o.event_id = $1::uuid`),
		deadLetters:         render(t, deadLettersSQL),
		operatorLock:        render(t, operatorLockSQL),
		operatorRequeue:     render(t, operatorRequeueSQL),
		operatorRequeueDead: render(t, `UPDATE "{{.DeadLetters}}" SET requeued_at = now() WHERE outbox_id = $1 AND requeued_at IS NULL`),
		operatorSetStatus:   render(t, operatorSetStatusSQL),
		operatorAudit:       render(t, operatorAuditSQL),
		operatorUnblock:     render(t, operatorUnblockSQL),
		countMatching:       render(t, `SELECT count(*) FROM "{{.Outbox}}" WHERE `),
		selectMatching:      render(t, `SELECT id, event_id FROM "{{.Outbox}}" WHERE `),

		enqueueHead:         render(t, enqueueHeadSQL),
		existingEvents:      render(t, `SELECT event_id FROM "{{.Outbox}}" WHERE event_id = ANY($1::uuid[])`),
		compensatedAttempts: render(t, compensatedAttemptsSQL),
		outboxName:          render(t, `"{{.Outbox}}"`),
		analyze:             render(t, `ANALYZE "{{.Outbox}}"`),
	}
}

// statsSQL counts the rows by status, a PENDING row that a claim holds as
// PROCESSING: a scan of the whole table.
const statsSQL = `
SELECT CASE WHEN o.status = 'PENDING' AND b.id IS NOT NULL THEN 'PROCESSING' ELSE o.status END, count(*)
FROM "{{.Outbox}}" o LEFT JOIN (SELECT DISTINCT unnest(ids) AS id FROM "{{.Outbox}}_claims") b ON b.id = o.id
GROUP BY 1`

// deadLettersSQL lists the dead letters, newest first, at most $1.
const deadLettersSQL = `SELECT id, outbox_id, event_id, aggregate_type, aggregate_id, event_type, retry_count,
        reason, failed_at, requeued_at FROM "{{.DeadLetters}}" ORDER BY id DESC LIMIT $1`

// operatorLockSQL locks the row of event $1 for an operator action, and
// reads its status (PROCESSING while a claim holds it).
const operatorLockSQL = `SELECT o.id, CASE WHEN o.status = 'PENDING' AND EXISTS (
            SELECT 1 FROM "{{.Outbox}}_claims" c WHERE o.id = ANY(c.ids)) THEN 'PROCESSING' ELSE o.status END,
        o.retry_count, o.aggregate_type, o.aggregate_id, o.event_id::text FROM "{{.Outbox}}" o
        WHERE o.event_id = $1::uuid FOR UPDATE OF o`

// operatorRequeueSQL gives row $1 a fresh chance now; $2, when not NULL,
// is a new deadline in microseconds from now, and a passed deadline is
// removed otherwise.
const operatorRequeueSQL = `UPDATE "{{.Outbox}}" SET status = 'PENDING', hold = 1, available_at = now(), processed_at = NULL,
            locked_until = NULL, lock_token = NULL,
            expires_at = CASE WHEN $2::bigint IS NOT NULL THEN now() + $2::bigint * interval '1 microsecond'
                              WHEN expires_at <= now() THEN NULL ELSE expires_at END
            WHERE id = $1`

// operatorSetStatusSQL moves row $1 to the final status $2 (SKIPPED): out
// of the hold indexes, and with a last_error, which the admin's list of
// SKIPPED events reads.
const operatorSetStatusSQL = `UPDATE "{{.Outbox}}" SET status = $2, hold = 0,
        last_error = COALESCE(last_error, 'skipped by an operator') WHERE id = $1`

// operatorAuditSQL records an operator action as an attempt row.
const operatorAuditSQL = `INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error)
        VALUES ($1::uuid, gen_random_uuid(), $2, $3, $4, $5, now(), now(), $6)`

// operatorUnblockSQL releases the BLOCKED events of aggregate ($1, $2)
// that no earlier FAILED event of the aggregate still holds back.
const operatorUnblockSQL = `UPDATE "{{.Outbox}}" o SET status = 'PENDING', hold = 1
        WHERE o.aggregate_type = $1 AND o.aggregate_id = $2 AND o.hold = 2 AND o.status = 'BLOCKED'
          AND NOT EXISTS (SELECT 1 FROM "{{.Outbox}}" f WHERE f.hold = 2 AND f.status = 'FAILED'
              AND f.aggregate_type = o.aggregate_type AND f.aggregate_id = o.aggregate_id AND f.id < o.id)`

// reapSQL returns rows PROCESSING under a lease of the previous schema
// (before lanes) whose lease ended to PENDING, keeping retry_count, and
// audits each with the claim token it had.
const reapSQL = `
WITH r AS (
    SELECT id, event_id, lock_token, retry_count, locked_until FROM "{{.Outbox}}"
    WHERE lock_token IS NOT NULL AND status = 'PROCESSING' AND locked_until < now()
    ORDER BY locked_until LIMIT $1
    FOR NO KEY UPDATE SKIP LOCKED
),
u AS (
    UPDATE "{{.Outbox}}" o SET status = 'PENDING', locked_until = NULL, lock_token = NULL
    FROM r WHERE o.id = r.id
    RETURNING o.id
),
att AS (
    INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error)
    SELECT r.event_id, COALESCE(r.lock_token, gen_random_uuid()), 'LEASE_EXPIRED', r.id, r.retry_count + 1, $2, now(), now(),
        'lease ended at ' || to_char(r.locked_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') ||
        ' without a result; returned to PENDING'
    FROM r JOIN u ON u.id = r.id
    ON CONFLICT DO NOTHING
)
SELECT count(*) FROM u`

// reapClaimsSQL ends the claims whose lanes are all gone (their relay's
// lease ended, or another relay took them): each of their rows (those the
// claim's relay did not complete) is audited LEASE_EXPIRED under the
// claim's token, whatever became of it since (the lane's new holder may
// have delivered it already), and the claim's row is deleted. Their
// events are PENDING as they were; the lanes' new holders deliver them.
const reapClaimsSQL = `
WITH dead AS (
    SELECT c.token, c.ids FROM "{{.Outbox}}_claims" c
    WHERE NOT EXISTS (
        SELECT 1 FROM unnest(c.lanes, c.lane_tokens) AS f(lane, token)
        JOIN "{{.Outbox}}_lanes" l ON l.lane = f.lane AND l.token = f.token
        WHERE l.lease_until_ms > (extract(epoch FROM now()) * 1000)::bigint)
    ORDER BY c.created_ms LIMIT $1
    FOR UPDATE OF c SKIP LOCKED
),
del AS (
    DELETE FROM "{{.Outbox}}_claims" c USING dead WHERE c.token = dead.token
),
r AS MATERIALIZED (
    SELECT dead.token, o.id, o.event_id, o.retry_count
    FROM dead CROSS JOIN LATERAL unnest(dead.ids) AS x(id) JOIN "{{.Outbox}}" o ON o.id = x.id
),
att AS (
    INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error)
    SELECT r.event_id, r.token, 'LEASE_EXPIRED', r.id, r.retry_count + 1, $2, now(), now(),
        'the lease of its lane ended without a result; returned to PENDING'
    FROM r
    ON CONFLICT DO NOTHING
)
SELECT count(*) FROM r`

// expireSQL ends waiting events past their deadline and returns them
// (expiredColumns), for their compensating events to be enqueued in the
// same transaction.
const expireSQL = `
WITH r AS (
    SELECT id, event_id, retry_count, expires_at FROM "{{.Outbox}}" o
    WHERE hold > 0 AND expires_at IS NOT NULL AND expires_at <= now() AND status IN ('PENDING', 'BLOCKED')
      AND NOT EXISTS (SELECT 1 FROM "{{.Outbox}}_claims" c WHERE o.id = ANY(c.ids))
    ORDER BY expires_at LIMIT $1
    FOR NO KEY UPDATE SKIP LOCKED
),
u AS (
    UPDATE "{{.Outbox}}" o SET status = 'EXPIRED', hold = 0, processed_at = now(),
        last_error = 'expired before delivery: deadline was ' ||
            to_char(r.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
    FROM r WHERE o.id = r.id
    RETURNING o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.headers,
        o.expires_at, o.retry_count, o.on_expired, o.last_error
),
att AS (
    INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error)
    SELECT u.event_id, gen_random_uuid(), 'EXPIRED', u.id, u.retry_count + 1, $2, now(), now(), u.last_error
    FROM u
)
SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, expires_at, retry_count, on_expired FROM u`

// blockSQL moves PENDING events that wait behind a FAILED event of their
// aggregate to BLOCKED, but for those a claim holds.
const blockSQL = `
WITH f AS (
    SELECT aggregate_type, aggregate_id, min(id) AS id FROM "{{.Outbox}}"
    WHERE hold = 2 AND status = 'FAILED' GROUP BY 1, 2
),
r AS (
    SELECT o.id FROM "{{.Outbox}}" o JOIN f ON f.aggregate_type = o.aggregate_type AND f.aggregate_id = o.aggregate_id
    WHERE o.status = 'PENDING' AND o.id > f.id
      AND NOT EXISTS (SELECT 1 FROM "{{.Outbox}}_claims" c WHERE o.id = ANY(c.ids))
    ORDER BY o.id LIMIT $1
    FOR NO KEY UPDATE OF o SKIP LOCKED
)
UPDATE "{{.Outbox}}" o SET status = 'BLOCKED', hold = 2 FROM r WHERE o.id = r.id`

// unblockSQL returns BLOCKED events with no FAILED event before them (or all
// of them when FAILED events do not block, $2 = false) to PENDING.
const unblockSQL = `
WITH r AS (
    SELECT o.id FROM "{{.Outbox}}" o
    WHERE o.hold = 2 AND o.status = 'BLOCKED' AND (NOT $2::bool OR NOT EXISTS (
        SELECT 1 FROM "{{.Outbox}}" f WHERE f.hold = 2 AND f.status = 'FAILED'
          AND f.aggregate_type = o.aggregate_type AND f.aggregate_id = o.aggregate_id AND f.id < o.id))
    ORDER BY o.id LIMIT $1
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE "{{.Outbox}}" o SET status = 'PENDING', hold = 1 FROM r WHERE o.id = r.id`

// countMovableSQL counts the events a relay can still move: those PENDING
// (held by a claim or not) but for those behind a FAILED event of their
// aggregate (when $1), and those PROCESSING under a lease of the previous
// schema. It reads the rows of hold 1 and, per lane, those of hold 0 from
// the lane's stored cursor on, never the delivered rows before it.
const countMovableSQL = `
WITH w AS (
    SELECT o.id, o.aggregate_type, o.aggregate_id FROM "{{.Outbox}}" o
    WHERE o.hold = 1 AND o.status = 'PENDING'
    UNION ALL
    SELECT x.id, x.aggregate_type, x.aggregate_id FROM "{{.Outbox}}_lanes" l CROSS JOIN LATERAL (
        SELECT o.id, o.aggregate_type, o.aggregate_id FROM "{{.Outbox}}" o
        WHERE o.lane = l.lane AND o.id >= l.next_id AND o.hold = 0 AND o.status IN ('PENDING', 'PROCESSING')) x
)
SELECT count(*) FROM w
WHERE NOT ($1::bool AND EXISTS (
    SELECT 1 FROM "{{.Outbox}}" f WHERE f.hold = 2 AND f.status = 'FAILED'
      AND f.aggregate_type = w.aggregate_type AND f.aggregate_id = w.aggregate_id AND f.id < w.id))`

const blockedAggregatesSQL = `
WITH f AS (
    SELECT DISTINCT ON (aggregate_type, aggregate_id) aggregate_type, aggregate_id, id, event_id
    FROM "{{.Outbox}}" WHERE hold = 2 AND status = 'FAILED' ORDER BY aggregate_type, aggregate_id, id
),
b AS (
    SELECT f.aggregate_type, f.aggregate_id, f.event_id,
        (SELECT count(*) FROM "{{.Outbox}}" o WHERE o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id
           AND o.id > f.id AND o.status IN ('PENDING', 'BLOCKED')) AS waiting
    FROM f
)
SELECT aggregate_type, aggregate_id, event_id, waiting, count(*) OVER () FROM b
WHERE waiting > 0 ORDER BY aggregate_type, aggregate_id LIMIT 100`

// attemptsSQL reads the audit trail of one event ($1), in attempt order
// and oldest first within an attempt: its
// rows in the attempts table, the delivery recorded on the event row (by
// migration 7, before lanes), and its delivery in the deliveries table:
// the one of its lane whose time is the row's processed_at.
const attemptsSQL = `
WITH o AS (
    SELECT id, event_id, status, lane, retry_count, processed_at, delivered_attempt, delivered_relay_id, delivered_token, delivered_started_at,
        delivered_finished_at, delivered_trace_id
    FROM "{{.Outbox}}" WHERE event_id = $1::uuid
)
SELECT attempt, relay_id, claim_token, started_at, finished_at, outcome, COALESCE(error, ''), COALESCE(trace_id, '')
FROM "{{.Attempts}}" WHERE event_id = $1::uuid
UNION ALL
SELECT delivered_attempt, delivered_relay_id, delivered_token, delivered_started_at, delivered_finished_at, 'DELIVERED', '',
    COALESCE(delivered_trace_id, '')
FROM o WHERE delivered_relay_id IS NOT NULL
UNION ALL
SELECT o.retry_count + 1, d.relay_id, d.token, d.started_at, d.finished_at, 'DELIVERED', '',
    COALESCE(d.trace_ids[array_position(d.ids, o.id)], '')
FROM o JOIN "{{.Outbox}}_deliveries" d ON d.completed_at = o.processed_at AND o.lane = ANY(d.lanes)
    AND (d.ids IS NULL OR o.id = ANY(d.ids))
WHERE o.status = 'PROCESSED'
ORDER BY 1, 5, 4`

// moveDeliverySQL copies the delivery recorded on event row $1, if any,
// into the attempts table and clears it from the row.
const moveDeliverySQL = `
WITH r AS (
    SELECT id, event_id, delivered_token, delivered_attempt, delivered_relay_id, delivered_started_at,
        delivered_finished_at, delivered_trace_id
    FROM "{{.Outbox}}" WHERE id = $1 AND delivered_relay_id IS NOT NULL
),
a AS (
    INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, trace_id)
    SELECT event_id, COALESCE(delivered_token, gen_random_uuid()), 'DELIVERED', id, delivered_attempt, delivered_relay_id,
        delivered_started_at, delivered_finished_at, delivered_trace_id
    FROM r
    ON CONFLICT DO NOTHING
)
UPDATE "{{.Outbox}}" o SET delivered_relay_id = NULL, delivered_attempt = NULL, delivered_started_at = NULL,
    delivered_finished_at = NULL, delivered_trace_id = NULL, delivered_token = NULL
FROM r WHERE o.id = r.id`

// enqueueHeadSQL is the head of the multi-row insert: the VALUES list that
// follows, one row of casts and placeholders per event, is written by
// enqueue.go and closed there.
const enqueueHeadSQL = `INSERT INTO "{{.Outbox}}" (event_id, aggregate_type, aggregate_id, event_type, payload, headers, on_expired, expires_at, available_at) ` +
	`SELECT v.e, v.at, v.ai, v.et, v.p, v.h, v.ox, ` +
	`COALESCE(v.xa, now() + v.ttl * interval '1 microsecond'), ` +
	`COALESCE(v.aa, now() + COALESCE(v.d, 0) * interval '1 microsecond') FROM (VALUES `

// compensatedAttemptsSQL records the compensations written for expired
// events ($1, with their tokens $2, rows $3, attempts $4 and notes $5) by
// relay $6, once each.
const compensatedAttemptsSQL = `INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error)
        SELECT e, t, 'COMPENSATED', o, a, $6, now(), now(), n
        FROM unnest($1::uuid[], $2::uuid[], $3::bigint[], $4::int[], $5::text[]) AS x(e, t, o, a, n)
        ON CONFLICT DO NOTHING`
