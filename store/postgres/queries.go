package postgres

import (
	"strconv"
	"strings"

	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/snapshotsql"
)

// queries holds the SQL of the store. Every statement is a template of
// internal/sqltext, the syntax of the migrations: the table names are
// {{.Outbox}}, {{.DeadLetters}} and {{.Attempts}} between double quotes,
// rendered once when the store is built. The claim's window sizes are
// rendered per size (claimParams); every value is a bind parameter.
type queries struct {
	claim                                         *sqltext.Template
	complete, completeExpiring                    string
	reap, expire, block, unblock                  string
	countMovable, stats, oldestPending, blockedAg string
	deadLetterCount                               string
	purge, overdue, claimIDs, missingIDs          string
	attempts, moveDelivery                        string
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

// claimParams are what the claim statement is rendered with: the table
// names and the window sizes, integers formatted by the template.
type claimParams struct {
	store.Tables
	Limit, FIFO, EDF int
}

// render renders a statement with the table names.
func render(t store.Tables, sql string) string { return sqltext.MustRender(sql, t) }

// placeholder renders the n-th bind parameter, from 1.
func placeholder(n int) string { return "$" + strconv.Itoa(n) }

func buildQueries(t store.Tables) queries {
	return queries{
		claim:            sqltext.MustParse("claim", claimSQL),
		complete:         render(t, completeSQL),
		completeExpiring: render(t, strings.TrimSuffix(completeSQL, "\nSELECT id FROM u")+completeExpiringTail),
		reap:             render(t, reapSQL),
		expire:           render(t, expireSQL),
		block:            render(t, blockSQL),
		unblock:          render(t, unblockSQL),
		countMovable:     render(t, countMovableSQL),
		stats:            render(t, `SELECT status, count(*) FROM "{{.Outbox}}" GROUP BY status`),
		oldestPending:    render(t, `SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8 FROM "{{.Outbox}}" WHERE status = 'PENDING'`),
		blockedAg:        render(t, blockedAggregatesSQL),
		deadLetterCount:  render(t, `SELECT count(*) FROM "{{.DeadLetters}}" WHERE requeued_at IS NULL`),
		purge:            render(t, purgeSQL),
		attempts:         render(t, attemptsSQL),
		moveDelivery:     render(t, moveDeliverySQL),
		overdue:          render(t, overdueSQL),
		claimIDs:         render(t, claimIDsSQL),
		missingIDs:       render(t, missingIDsSQL),
		snapshot:         snapshotDialect(t, render(t, blockedAggregatesSQL)),

		listEvents:          render(t, `SELECT `+recordColumns+` FROM "{{.Outbox}}"`),
		getEvent:            render(t, `SELECT `+recordColumns+` FROM "{{.Outbox}}" WHERE event_id = $1::uuid`),
		deadLetters:         render(t, deadLettersSQL),
		operatorLock:        render(t, operatorLockSQL),
		operatorRequeue:     render(t, operatorRequeueSQL),
		operatorRequeueDead: render(t, `UPDATE "{{.DeadLetters}}" SET requeued_at = now() WHERE outbox_id = $1 AND requeued_at IS NULL`),
		operatorSetStatus:   render(t, `UPDATE "{{.Outbox}}" SET status = $2 WHERE id = $1`),
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

// deadLettersSQL lists the dead letters, newest first, at most $1.
const deadLettersSQL = `SELECT id, outbox_id, event_id, aggregate_type, aggregate_id, event_type, retry_count,
        reason, failed_at, requeued_at FROM "{{.DeadLetters}}" ORDER BY id DESC LIMIT $1`

// operatorLockSQL locks the row of event $1 for an operator action.
const operatorLockSQL = `SELECT id, status, retry_count, aggregate_type, aggregate_id, event_id::text FROM "{{.Outbox}}"
        WHERE event_id = $1::uuid FOR UPDATE`

// operatorRequeueSQL gives row $1 a fresh chance now; $2, when not NULL,
// is a new deadline in microseconds from now, and a passed deadline is
// removed otherwise.
const operatorRequeueSQL = `UPDATE "{{.Outbox}}" SET status = 'PENDING', available_at = now(), processed_at = NULL,
            locked_until = NULL, lock_token = NULL,
            expires_at = CASE WHEN $2::bigint IS NOT NULL THEN now() + $2::bigint * interval '1 microsecond'
                              WHEN expires_at <= now() THEN NULL ELSE expires_at END
            WHERE id = $1`

// operatorAuditSQL records an operator action as an attempt row.
const operatorAuditSQL = `INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error)
        VALUES ($1::uuid, gen_random_uuid(), $2, $3, $4, $5, now(), now(), $6)`

// operatorUnblockSQL releases the BLOCKED events of aggregate ($1, $2)
// that no earlier FAILED event of the aggregate still holds back.
const operatorUnblockSQL = `UPDATE "{{.Outbox}}" o SET status = 'PENDING'
        WHERE o.aggregate_type = $1 AND o.aggregate_id = $2 AND o.status = 'BLOCKED'
          AND NOT EXISTS (SELECT 1 FROM "{{.Outbox}}" f WHERE f.status = 'FAILED'
              AND f.aggregate_type = o.aggregate_type AND f.aggregate_id = o.aggregate_id AND f.id < o.id)`

// claimSQL claims a batch in one statement.
//
//	win: the window: fifo, the first {{.Limit}} due PENDING rows in
//	     (available_at, id) order, and edf, the {{.EDF}} due PENDING rows with
//	     the nearest deadlines (earliest deadline first; {{.EDF}} is 0 for
//	     strict FIFO). prio is 0 for the first {{.FIFO}} rows of fifo and for
//	     edf, 1 for the rest of fifo; w: the aggregates they belong to,
//	     oldest first, with their best prio. At most {{.Limit}} aggregates have
//	     prio 0, so each of them gets its head claimed (c0 orders by pos,
//	     then prio); the prio 1 ones fill what is left.
//	r:   for each such aggregate, its first unfinished rows in id order (FAILED
//	     counts when $4), about a fair share of {{.Limit}} per aggregate. The first
//	     is the aggregate's head.
//	c:   the claimable runs: from the head on, while rows are PENDING and
//	     due. Rows PROCESSING under one of this relay's own tokens ($4) are
//	     stepped over: the relay sends its batches in order and holds back
//	     a later event itself if an earlier one fails. But a PENDING row
//	     before the aggregate's last own row (last_mine: one the relay gave
//	     back while a later batch is still in flight) stops the run: it must
//	     go out before that later batch's events, which the relay holds back.
//	dfr: rows (of the window and of r) that wait behind a head in backoff
//	     take the head's available_at, and blk: those behind a FAILED head
//	     become BLOCKED, so that neither crowds the next window: each claim
//	     clears its window of what it cannot take, so other aggregates
//	     are reached however many events pile up behind one head.
//	l:   the heads this statement could lock (SKIP LOCKED: a concurrent
//	     claim keeps its aggregates). Holding the head locked while it is
//	     still PENDING is what makes a run exclusive: another claim can take
//	     an aggregate's rows only from its head, and the head is either
//	     locked by this statement or, once committed, PROCESSING.
//	the update: the runs whose head this statement locked.
//
// Row sets are handed to the table as "id = ANY(ARRAY(...))", which is
// always a primary-key lookup: a plan cached while the table was empty
// cannot turn it into a scan of every pending row.
const claimSQL = `
WITH fifo AS MATERIALIZED (
    SELECT id, aggregate_type, aggregate_id, available_at FROM "{{.Outbox}}"
    WHERE status = 'PENDING' AND available_at <= now()
    ORDER BY available_at, id
    LIMIT {{.Limit}}
),
edf AS MATERIALIZED (
    SELECT id, aggregate_type, aggregate_id, available_at FROM "{{.Outbox}}"
    WHERE status = 'PENDING' AND expires_at IS NOT NULL AND available_at <= now()
    ORDER BY expires_at, id
    LIMIT {{.EDF}}
),
win AS MATERIALIZED (
    SELECT id, aggregate_type, aggregate_id, available_at, min(prio) AS prio FROM (
        SELECT id, aggregate_type, aggregate_id, available_at,
            CASE WHEN row_number() OVER (ORDER BY available_at, id) <= {{.FIFO}} THEN 0 ELSE 1 END AS prio
        FROM fifo
        UNION ALL
        SELECT id, aggregate_type, aggregate_id, available_at, 0 FROM edf
    ) x GROUP BY id, aggregate_type, aggregate_id, available_at
),
w AS MATERIALIZED (
    SELECT row_number() OVER () AS agg_no, g.aggregate_type, g.aggregate_id, g.first_due, g.prio,
        CASE WHEN cardinality($4::uuid[]) > 0 THEN
            (SELECT max(m.id) FROM "{{.Outbox}}" m
              WHERE m.aggregate_type = g.aggregate_type AND m.aggregate_id = g.aggregate_id
                AND m.status = 'PROCESSING' AND m.lock_token = ANY($4::uuid[]))
        END AS last_mine
    FROM (SELECT aggregate_type, aggregate_id, min(available_at) AS first_due, min(prio) AS prio FROM win GROUP BY 1, 2) g
),
per AS (
    SELECT GREATEST(1, ceil({{.Limit}}::numeric / GREATEST(count(*), 1)))::int AS n FROM w
),
r AS MATERIALIZED (
    SELECT w.agg_no, w.aggregate_type, w.aggregate_id, w.first_due, w.prio, x.id, x.status, x.available_at, x.ok,
        row_number() OVER run AS pos,
        sum(CASE WHEN (x.ok AND x.id > COALESCE(w.last_mine, 0)) OR x.mine THEN 0 ELSE 1 END) OVER run AS bad
    FROM w CROSS JOIN per CROSS JOIN LATERAL (
        SELECT o.id, o.status, o.available_at,
            (o.status = 'PENDING' AND o.available_at <= now()) AS ok,
            (o.status = 'PROCESSING' AND o.lock_token = ANY($4::uuid[])) AS mine
        FROM "{{.Outbox}}" o
        WHERE o.aggregate_type = w.aggregate_type AND o.aggregate_id = w.aggregate_id
          AND o.status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED')
          AND (o.status <> 'FAILED' OR $3::bool)
        ORDER BY o.id
        LIMIT per.n * (1 + cardinality($4::uuid[]))
    ) x
    WINDOW run AS (PARTITION BY w.agg_no ORDER BY x.id)
),
c0 AS (
    SELECT id, agg_no FROM r
    WHERE bad = 0 AND ok
    ORDER BY pos, prio, first_due, id
    LIMIT {{.Limit}}
),
c AS MATERIALIZED (
    SELECT id, min(id) OVER (PARTITION BY agg_no) AS head_id FROM c0
),
held AS MATERIALIZED (
    SELECT aggregate_type, aggregate_id, status, available_at FROM r
    WHERE pos = 1 AND (status = 'FAILED' OR (status = 'PENDING' AND NOT ok))
),
hr AS MATERIALIZED (
    SELECT x.id, h.status, h.available_at FROM held h
    JOIN (SELECT id, aggregate_type, aggregate_id FROM r UNION SELECT id, aggregate_type, aggregate_id FROM win) x
      ON x.aggregate_type = h.aggregate_type AND x.aggregate_id = h.aggregate_id
),
dfr AS (
    UPDATE "{{.Outbox}}" o SET available_at = hr.available_at
    FROM hr
    WHERE o.id = ANY(ARRAY(SELECT id FROM hr WHERE status = 'PENDING')) AND o.id = hr.id
      AND o.status = 'PENDING' AND o.available_at < hr.available_at
),
blk AS (
    UPDATE "{{.Outbox}}" o SET status = 'BLOCKED'
    WHERE o.id = ANY(ARRAY(SELECT id FROM hr WHERE status = 'FAILED')) AND o.status = 'PENDING'
),
l AS MATERIALIZED (
    SELECT o.id FROM "{{.Outbox}}" o
    WHERE o.id = ANY(ARRAY(SELECT DISTINCT head_id FROM c)) AND o.status = 'PENDING'
    ORDER BY o.id
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE "{{.Outbox}}" o SET status = 'PROCESSING', lock_token = $1::uuid,
    locked_until = now() + $2::bigint * interval '1 millisecond'
WHERE o.id = ANY(ARRAY(SELECT c.id FROM c WHERE c.head_id = ANY(ARRAY(SELECT id FROM l))))
RETURNING o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.headers,
    o.retry_count, o.created_at, o.expires_at,
    (o.expires_at IS NOT NULL AND o.expires_at <= now()) AS expired, now(), o.locked_until, o.aggregate_seq`

// completeSQL applies a batch of outcomes under one claim token ($1) in one
// statement: the guarded state change, dead letters for new FAILED rows,
// BLOCKED for the waiting events of their aggregates (when $3), a pushed-back
// available_at for the waiting events of retried aggregates, and one attempt
// row per attempted event that was not delivered (a replay conflicts and
// writes nothing). A delivery is recorded on the event row instead
// (migration 7), with its claim token in delivered_token, which is how a
// replayed DELIVERED outcome is recognised and writes nothing either; a
// delivery that carries an error text (a sink's note) keeps its attempt
// row, so that the text is kept too.
const completeSQL = `
WITH i AS (
    SELECT * FROM unnest($4::bigint[], $5::uuid[], $6::text[], $7::text[], $8::bigint[],
                         $9::bool[], $10::bool[], $11::int[], $12::timestamptz[], $13::timestamptz[], $14::text[])
        AS i(id, event_id, kind, err, retry_ms, block, attempted, attempt, started_at, finished_at, trace_id)
),
u AS (
    UPDATE "{{.Outbox}}" o SET
        status = CASE i.kind
            WHEN 'DELIVERED' THEN 'PROCESSED'
            WHEN 'FAILED' THEN 'FAILED'
            WHEN 'EXPIRED' THEN 'EXPIRED'
            WHEN 'RETRY' THEN 'PENDING'
            ELSE CASE WHEN i.block THEN 'BLOCKED' ELSE 'PENDING' END END,
        retry_count = o.retry_count + CASE WHEN i.kind IN ('RETRY', 'FAILED') THEN 1 ELSE 0 END,
        processed_at = CASE WHEN i.kind IN ('DELIVERED', 'FAILED', 'EXPIRED') THEN now() END,
        available_at = CASE WHEN i.kind IN ('RETRY', 'RELEASED')
            THEN now() + i.retry_ms * interval '1 millisecond' ELSE o.available_at END,
        last_error = CASE WHEN i.kind IN ('RETRY', 'FAILED', 'EXPIRED') THEN left(i.err, 2000) ELSE o.last_error END,
        delivered_relay_id = CASE WHEN d THEN $2 ELSE o.delivered_relay_id END,
        delivered_attempt = CASE WHEN d THEN i.attempt ELSE o.delivered_attempt END,
        delivered_started_at = CASE WHEN d THEN i.started_at ELSE o.delivered_started_at END,
        delivered_finished_at = CASE WHEN d THEN i.finished_at ELSE o.delivered_finished_at END,
        delivered_trace_id = CASE WHEN d THEN NULLIF(i.trace_id, '') ELSE o.delivered_trace_id END,
        delivered_token = CASE WHEN d THEN $1::uuid ELSE o.delivered_token END,
        locked_until = NULL,
        lock_token = NULL
    FROM (SELECT *, kind = 'DELIVERED' AND attempted AND COALESCE(err, '') = '' AS d FROM i) i
    WHERE o.id = i.id AND o.status = 'PROCESSING' AND o.lock_token = $1::uuid
    RETURNING o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.headers,
        o.retry_count, o.status, o.available_at, i.kind, i.err, o.expires_at, o.on_expired
),
dl AS (
    INSERT INTO "{{.DeadLetters}}" (outbox_id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, retry_count, reason)
    SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, retry_count, COALESCE(NULLIF(err, ''), 'failed')
    FROM u WHERE status = 'FAILED'
),
blk AS (
    UPDATE "{{.Outbox}}" o SET status = 'BLOCKED'
    FROM (SELECT aggregate_type, aggregate_id, min(id) AS id FROM u WHERE status = 'FAILED' GROUP BY 1, 2) f
    WHERE $3::bool AND o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id
      AND o.id > f.id AND o.status = 'PENDING'
),
dfr AS (
    UPDATE "{{.Outbox}}" o SET available_at = r.available_at
    FROM (SELECT aggregate_type, aggregate_id, min(id) AS id, max(available_at) AS available_at
          FROM u WHERE kind = 'RETRY' GROUP BY 1, 2) r
    WHERE o.aggregate_type = r.aggregate_type AND o.aggregate_id = r.aggregate_id
      AND o.id > r.id AND o.status = 'PENDING' AND o.available_at < r.available_at
),
att AS (
    INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error, trace_id)
    SELECT i.event_id, $1::uuid, i.kind, i.id, i.attempt, $2, i.started_at, i.finished_at,
        CASE WHEN u.id IS NULL
            THEN concat_ws('; ', NULLIF(i.err, ''), 'lease lost before the mark: the row was not changed')
            ELSE NULLIF(left(i.err, 2000), '') END,
        NULLIF(i.trace_id, '')
    FROM i LEFT JOIN u ON u.id = i.id
    WHERE i.attempted AND NOT (i.kind = 'DELIVERED' AND COALESCE(i.err, '') = '' AND (u.id IS NOT NULL OR EXISTS (
        SELECT 1 FROM "{{.Outbox}}" p WHERE p.id = i.id AND p.status = 'PROCESSED' AND p.delivered_token = $1::uuid)))
    ON CONFLICT DO NOTHING
)
SELECT id FROM u`

// completeExpiringTail replaces the last line of completeSQL for a batch
// with EXPIRED outcomes: the applied rows come back as expiredColumns, the
// payload and headers only for rows with a compensating event to enqueue.
const completeExpiringTail = `
SELECT id, event_id, aggregate_type, aggregate_id, event_type,
    CASE WHEN c THEN payload END, CASE WHEN c THEN headers END, expires_at, retry_count,
    CASE WHEN c THEN on_expired END
FROM (SELECT *, (status = 'EXPIRED' AND on_expired IS NOT NULL) AS c FROM u) u`

// reapSQL returns PROCESSING rows whose lease ended to PENDING, keeping
// retry_count, and audits each with the claim token it had.
const reapSQL = `
WITH r AS (
    SELECT id, event_id, lock_token, retry_count, locked_until FROM "{{.Outbox}}"
    WHERE status = 'PROCESSING' AND locked_until < now()
    ORDER BY id LIMIT $1
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

// expireSQL ends waiting events past their deadline and returns them
// (expiredColumns), for their compensating events to be enqueued in the
// same transaction.
const expireSQL = `
WITH r AS (
    SELECT id, event_id, retry_count, expires_at FROM "{{.Outbox}}"
    WHERE status IN ('PENDING', 'BLOCKED') AND expires_at IS NOT NULL AND expires_at <= now()
    ORDER BY expires_at LIMIT $1
    FOR NO KEY UPDATE SKIP LOCKED
),
u AS (
    UPDATE "{{.Outbox}}" o SET status = 'EXPIRED', processed_at = now(),
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
// aggregate to BLOCKED.
const blockSQL = `
WITH f AS (
    SELECT aggregate_type, aggregate_id, min(id) AS id FROM "{{.Outbox}}" WHERE status = 'FAILED' GROUP BY 1, 2
),
r AS (
    SELECT o.id FROM "{{.Outbox}}" o JOIN f ON f.aggregate_type = o.aggregate_type AND f.aggregate_id = o.aggregate_id
    WHERE o.status = 'PENDING' AND o.id > f.id
    ORDER BY o.id LIMIT $1
    FOR NO KEY UPDATE OF o SKIP LOCKED
)
UPDATE "{{.Outbox}}" o SET status = 'BLOCKED' FROM r WHERE o.id = r.id`

// unblockSQL returns BLOCKED events with no FAILED event before them (or all
// of them when FAILED events do not block, $2 = false) to PENDING.
const unblockSQL = `
WITH r AS (
    SELECT o.id FROM "{{.Outbox}}" o
    WHERE o.status = 'BLOCKED' AND (NOT $2::bool OR NOT EXISTS (
        SELECT 1 FROM "{{.Outbox}}" f WHERE f.status = 'FAILED'
          AND f.aggregate_type = o.aggregate_type AND f.aggregate_id = o.aggregate_id AND f.id < o.id))
    ORDER BY o.id LIMIT $1
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE "{{.Outbox}}" o SET status = 'PENDING' FROM r WHERE o.id = r.id`

const countMovableSQL = `
SELECT count(*) FROM "{{.Outbox}}" o
WHERE o.status = 'PROCESSING' OR (o.status = 'PENDING' AND NOT ($1::bool AND EXISTS (
    SELECT 1 FROM "{{.Outbox}}" f WHERE f.status = 'FAILED'
      AND f.aggregate_type = o.aggregate_type AND f.aggregate_id = o.aggregate_id AND f.id < o.id)))`

const blockedAggregatesSQL = `
WITH f AS (
    SELECT DISTINCT ON (aggregate_type, aggregate_id) aggregate_type, aggregate_id, id, event_id
    FROM "{{.Outbox}}" WHERE status = 'FAILED' ORDER BY aggregate_type, aggregate_id, id
),
b AS (
    SELECT f.aggregate_type, f.aggregate_id, f.event_id,
        (SELECT count(*) FROM "{{.Outbox}}" o WHERE o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id
           AND o.id > f.id AND o.status IN ('PENDING', 'BLOCKED')) AS waiting
    FROM f
)
SELECT aggregate_type, aggregate_id, event_id, waiting, count(*) OVER () FROM b
WHERE waiting > 0 ORDER BY aggregate_type, aggregate_id LIMIT 100`

// attemptsSQL reads the audit trail of one event ($1), oldest first: its
// rows in the attempts table and the delivery recorded on the event row.
const attemptsSQL = `
SELECT attempt, relay_id, claim_token, started_at, finished_at, outcome, COALESCE(error, ''), COALESCE(trace_id, '')
FROM "{{.Attempts}}" WHERE event_id = $1::uuid
UNION ALL
SELECT delivered_attempt, delivered_relay_id, delivered_token, delivered_started_at, delivered_finished_at, 'DELIVERED', '',
    COALESCE(delivered_trace_id, '')
FROM "{{.Outbox}}" WHERE event_id = $1::uuid AND delivered_relay_id IS NOT NULL
ORDER BY 5, 4, 1`

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
