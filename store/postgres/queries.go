package postgres

import (
	"embed"
	"strconv"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/dialect"
	"github.com/txoutbox/outbox/store/internal/snapshotsql"
)

// sqlFiles are the SQL of the store, one file per step (sql/<step>.sql),
// each statement named <step>.<name>, in the template syntax of
// internal/sqltext, the syntax of the migrations: the table names are
// {{.Outbox}}, {{.DeadLetters}} and {{.Attempts}} between double quotes,
// rendered once when the store is built; every value is a bind parameter.
//
//go:embed sql/*.sql
var sqlFiles embed.FS

// statements is sqlFiles, parsed once.
var statements = sqltext.MustParseFS(sqlFiles, "sql/*.sql")

// sqlDialect is PostgreSQL's dialect, for the SQL the backends share
// (lanes, routes, snapshot, admin queries): pgx scans the clock as a
// time.Time, the ages are float seconds (0 for none) and the event ids are
// uuid bytes.
var sqlDialect = dialect.Dialect{
	Dollar:       true,
	Quote:        `"`,
	ClockMS:      "(extract(epoch FROM clock_timestamp()) * 1000)::bigint",
	Now:          "now()",
	Ago:          func(m string) string { return "now() - " + m + "::bigint * interval '1 microsecond'" },
	Minute:       func(c string) string { return "date_trunc('minute', " + c + ")" },
	Text:         func(c string) string { return c + "::text" },
	InsertIgnore: "INSERT INTO",
	Conflict:     "ON CONFLICT DO NOTHING",
	UpsertOn:     "ON CONFLICT (%s) DO UPDATE SET",
	Excluded:     "excluded.%s",
	Lock:         "FOR UPDATE",
	SkipLocked:   "SKIP LOCKED",
	TimeArg:      func(t time.Time) any { return t },
	ScanClock: func() (any, func() time.Time) {
		var now time.Time
		return &now, func() time.Time { return now }
	},
	ScanAge: func() (any, func() time.Duration) {
		var seconds float64
		return &seconds, func() time.Duration { return time.Duration(seconds * float64(time.Second)) }
	},
	ScanEventID: func(id *outbox.EventID) (any, func()) {
		var raw [16]byte
		return &raw, func() { *id = outbox.EventID(raw) }
	},
}

// names is what the statements are rendered with: the table names and the
// fixed fragments of the overdue report (backend.OverdueWhere on the
// database clock, every row with a deadline having hold 1 or 2 until it
// ends, the deadline index; and backend.MaxOverdueGroups).
type names struct {
	store.Tables
	OverdueWhere  string
	OverdueGroups int
}

// The statements without table names, rendered once: the clock of a
// claim's read (claim.go), the wake-up of the relays (enqueue.go, store.go)
// and the gauge lease's advisory lock (snapshot.go).
var (
	xactIDSQL      = statements.MustRenderNamed("claim.xact_id", nil)
	notifySQL      = statements.MustRenderNamed("store.notify", nil)
	gaugeLockSQL   = statements.MustRenderNamed("snapshot.gauge_lock", nil)
	gaugeUnlockSQL = statements.MustRenderNamed("snapshot.gauge_unlock", nil)
)

// migrateSQL renders a catalog statement of the schema inspection (its
// table is a bind parameter), per call: the store runs them seldom.
func migrateSQL(name string) string { return statements.MustRenderNamed(name, nil) }

// queries holds the statements, rendered with the names when the store is
// built; the completion's (complete.go) are Go text until they join
// sql/complete.sql.
type queries struct {
	readClaim, readClaimIDs, claims, commitClaim  string
	complete, completeExpiring, completeDelivered string
	reap, reapClaims, expire, block, unblock      string
	countMovable, stats, oldestPending, blockedAg string
	deadLetterCount                               string
	purge, purgeDeliveries, overdue, missingIDs   string
	attempts, moveDelivery                        string
	idOrder, scanBehind                           string
	snapshot                                      snapshotsql.Statements

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
	enqueueHead, enqueueTail, enqueueLockedTail string
	existingEvents, compensatedAttempts         string
	// outboxName is the quoted outbox table as a regclass text, a bind
	// parameter of the analyze check; analyze analyzes the table.
	outboxName, analyze, analyzeStale string
}

// render renders a statement with the table names.
func render(t store.Tables, sql string) string { return sqltext.MustRender(sql, t) }

// placeholder renders the n-th bind parameter, from 1.
func placeholder(n int) string { return "$" + strconv.Itoa(n) }

func buildQueries(t store.Tables) queries {
	n := names{Tables: t, OverdueWhere: "hold > 0 AND " + backend.OverdueWhere("now()"), OverdueGroups: backend.MaxOverdueGroups}
	stmt := func(name string) string { return statements.MustRenderNamed(name, n) }
	return queries{
		readClaim:         stmt("claim.read"),
		readClaimIDs:      stmt("claim.read_ids"),
		claims:            stmt("claim.claims"),
		idOrder:           stmt("behind.id_order"),
		scanBehind:        stmt("behind.scan"),
		commitClaim:       stmt("claim.commit"),
		reapClaims:        stmt("sweep.reap_claims"),
		complete:          render(t, completeSQL),
		completeDelivered: render(t, completeDeliveredSQL),
		completeExpiring:  render(t, completeExpiringSQL),
		reap:              stmt("sweep.reap"),
		expire:            stmt("compensate.expire"),
		block:             stmt("sweep.block"),
		unblock:           stmt("sweep.unblock"),
		countMovable:      stmt("sweep.count_movable"),
		stats:             stmt("admin.stats"),
		oldestPending:     stmt("admin.oldest_pending"),
		blockedAg:         stmt("admin.blocked_aggregates"),
		deadLetterCount:   stmt("admin.dead_letter_count"),
		purge:             stmt("admin.purge"),
		purgeDeliveries:   stmt("admin.purge_deliveries"),
		attempts:          stmt("admin.attempts"),
		moveDelivery:      stmt("admin.move_delivery"),
		overdue:           stmt("overdue.groups"),
		missingIDs:        stmt("claim.missing_ids"),
		snapshot:          snapshotStatements(stmt),

		listEvents:          stmt("admin.list_events"),
		getEvent:            stmt("admin.get_event"),
		deadLetters:         stmt("admin.dead_letters"),
		operatorLock:        stmt("admin.operator_lock"),
		operatorRequeue:     stmt("admin.operator_requeue"),
		operatorRequeueDead: stmt("admin.operator_requeue_dead"),
		operatorSetStatus:   stmt("admin.operator_set_status"),
		operatorAudit:       stmt("admin.operator_audit"),
		operatorUnblock:     stmt("admin.operator_unblock"),
		countMatching:       stmt("admin.count_matching"),
		selectMatching:      stmt("admin.select_matching"),

		enqueueHead:         stmt("enqueue.head"),
		enqueueTail:         stmt("enqueue.tail"),
		enqueueLockedTail:   stmt("enqueue.locked_tail"),
		existingEvents:      stmt("compensate.existing_events"),
		compensatedAttempts: stmt("compensate.attempts"),
		outboxName:          stmt("analyze.outbox_name"),
		analyze:             stmt("analyze.outbox"),
		analyzeStale:        stmt("analyze.stale"),
	}
}

// completeSQL applies a batch of outcomes under one claim token ($1) in one
// statement. The fence: v, the claim's lanes still held under the tokens
// it was made under (a share lock on those lane rows keeps a balance from
// taking them until this commits), and the rows must be the claim's own
// (mine) and still PENDING. Then: the state change; dead letters for new
// FAILED rows; BLOCKED for the waiting events of their aggregates (when
// $3); a pushed-back available_at for the waiting events of retried
// aggregates (neither touches rows another claim holds); one attempt row
// per attempted event that was not delivered (a replay conflicts and
// writes nothing); one row in the deliveries table per start and finish
// time of the delivered events (their audit: the lanes of the events, which
// are the PROCESSED rows of those lanes whose processed_at is now(), and
// only when some event carries a trace id, the events and their trace
// ids); and the claim's row loses
// the rows completed (and goes when none is left).
//
// "(x IN (SELECT ...)) IS TRUE" keeps the membership test a hashed
// subquery: as a plain IN it becomes a join, which PostgreSQL, expecting
// 10 rows of each unnest, plans as a nested loop over 1,000 x 1,000 rows.
//
// A delivery writes only status and processed_at of the event row, and
// hold stays 0 for a row that had it: no index names those columns, so the
// update is HOT. A replayed DELIVERED outcome is recognised by its claim's
// row in the deliveries table (the event is PROCESSED at that row's time)
// and writes nothing either; a delivery that
// carries an error text (a sink's note) keeps its attempt row, so that
// the text is kept too.
const completeSQL = `
WITH i AS (
    SELECT * FROM unnest($4::bigint[], $5::uuid[], $6::text[], $7::text[], $8::bigint[],
                         $9::bool[], $10::bool[], $11::int[], $12::timestamptz[], $13::timestamptz[], $14::text[])
        AS i(id, event_id, kind, err, retry_ms, block, attempted, attempt, started_at, finished_at, trace_id)
),
c AS MATERIALIZED (
    SELECT lanes, lane_tokens, ids FROM "{{.Outbox}}_claims" WHERE token = $1::uuid
),
v AS MATERIALIZED (
    SELECT l.lane FROM c CROSS JOIN LATERAL unnest(c.lanes, c.lane_tokens) AS f(lane, token)
    JOIN "{{.Outbox}}_lanes" l ON l.lane = f.lane AND l.token = f.token
    WHERE l.lease_until_ms > (extract(epoch FROM now()) * 1000)::bigint
    ORDER BY l.lane
    FOR SHARE OF l
),
mine AS MATERIALIZED (
    SELECT unnest(ids) AS id FROM c WHERE EXISTS (SELECT 1 FROM v)
),
u AS (
    UPDATE "{{.Outbox}}" o SET
        status = CASE i.kind
            WHEN 'DELIVERED' THEN 'PROCESSED'
            WHEN 'FAILED' THEN 'FAILED'
            WHEN 'EXPIRED' THEN 'EXPIRED'
            WHEN 'RETRY' THEN 'PENDING'
            ELSE CASE WHEN i.block THEN 'BLOCKED' ELSE 'PENDING' END END,
        hold = CASE WHEN i.kind IN ('DELIVERED', 'EXPIRED') THEN 0
            WHEN i.kind = 'FAILED' OR (i.kind = 'RELEASED' AND i.block) THEN 2 ELSE 1 END,
        retry_count = o.retry_count + CASE WHEN i.kind IN ('RETRY', 'FAILED') THEN 1 ELSE 0 END,
        processed_at = CASE WHEN i.kind IN ('DELIVERED', 'FAILED', 'EXPIRED') THEN now() END,
        available_at = CASE WHEN i.kind IN ('RETRY', 'RELEASED')
            THEN now() + i.retry_ms * interval '1 millisecond' ELSE o.available_at END,
        last_error = CASE WHEN i.kind IN ('RETRY', 'FAILED', 'EXPIRED') THEN left(i.err, 2000) ELSE o.last_error END
    FROM i
    WHERE o.id = i.id AND o.status = 'PENDING'
      AND (i.id IN (SELECT id FROM mine)) IS TRUE AND o.lane = ANY(ARRAY(SELECT lane FROM v))
    RETURNING o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.headers,
        o.retry_count, o.status, o.available_at, i.kind, i.err, o.expires_at, o.on_expired,
        i.attempted, i.started_at, i.finished_at, i.trace_id, o.lane
),
busy AS MATERIALIZED (
    SELECT DISTINCT unnest(ids) AS id FROM "{{.Outbox}}_claims"
),
dl AS (
    INSERT INTO "{{.DeadLetters}}" (outbox_id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, retry_count, reason)
    SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, retry_count, COALESCE(NULLIF(err, ''), 'failed')
    FROM u WHERE status = 'FAILED'
),
blk AS (
    UPDATE "{{.Outbox}}" o SET status = 'BLOCKED', hold = 2
    FROM (SELECT aggregate_type, aggregate_id, min(id) AS id FROM u WHERE status = 'FAILED' GROUP BY 1, 2) f
    WHERE $3::bool AND o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id
      AND o.id > f.id AND o.status = 'PENDING' AND o.id NOT IN (SELECT id FROM busy)
),
dfr AS (
    UPDATE "{{.Outbox}}" o SET available_at = r.available_at, hold = 1
    FROM (SELECT aggregate_type, aggregate_id, min(id) AS id, max(available_at) AS available_at
          FROM u WHERE kind = 'RETRY' GROUP BY 1, 2) r
    WHERE o.aggregate_type = r.aggregate_type AND o.aggregate_id = r.aggregate_id
      AND o.id > r.id AND o.status = 'PENDING' AND (o.available_at < r.available_at OR o.hold = 0)
      AND o.id NOT IN (SELECT id FROM busy)
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
        SELECT 1 FROM "{{.Outbox}}_deliveries" d JOIN "{{.Outbox}}" p ON p.id = i.id
        WHERE d.token = $1::uuid AND p.status = 'PROCESSED' AND p.processed_at = d.completed_at)))
    ON CONFLICT DO NOTHING
),
dlv AS (
    INSERT INTO "{{.Outbox}}_deliveries" (token, relay_id, completed_at, started_at, finished_at, lanes, delivered, ids, trace_ids)
    SELECT $1::uuid, $2, now(), u.started_at, u.finished_at, array_agg(DISTINCT u.lane), count(*),
        CASE WHEN bool_or(COALESCE(u.trace_id, '') <> '') THEN array_agg(u.id ORDER BY u.id) END,
        CASE WHEN bool_or(COALESCE(u.trace_id, '') <> '') THEN array_agg(NULLIF(u.trace_id, '') ORDER BY u.id) END
    FROM u
    WHERE u.kind = 'DELIVERED' AND u.attempted AND COALESCE(u.err, '') = ''
    GROUP BY u.started_at, u.finished_at
),
cd AS (
    DELETE FROM "{{.Outbox}}_claims" WHERE token = $1::uuid AND (ids = $15::bigint[] OR ids <@ $4::bigint[]) AND EXISTS (SELECT 1 FROM v)
),
cu AS (
    UPDATE "{{.Outbox}}_claims" SET ids = ARRAY(SELECT x FROM unnest(ids) AS x WHERE x <> ALL($4::bigint[]) ORDER BY x)
    WHERE token = $1::uuid AND NOT (ids = $15::bigint[] OR ids <@ $4::bigint[]) AND EXISTS (SELECT 1 FROM v)
)
SELECT id FROM u`

// completeDeliveredSQL is completeSQL for the common batch: every outcome
// DELIVERED, attempted, without error or trace id, sent in one call
// ($4 started, $5 finished). $3 are the rows, $6 their event ids and $7
// their attempt numbers; $8 the rows sorted (the claim's ids when the
// batch is whole: the claim's row is then deleted without comparing
// element by element). The fence, the audit of a fenced or replayed
// outcome and the claim's bookkeeping are those of completeSQL.
const completeDeliveredSQL = `
WITH c AS MATERIALIZED (
    SELECT lanes, lane_tokens, ids FROM "{{.Outbox}}_claims" WHERE token = $1::uuid
),
v AS MATERIALIZED (
    SELECT l.lane FROM c CROSS JOIN LATERAL unnest(c.lanes, c.lane_tokens) AS f(lane, token)
    JOIN "{{.Outbox}}_lanes" l ON l.lane = f.lane AND l.token = f.token
    WHERE l.lease_until_ms > (extract(epoch FROM now()) * 1000)::bigint
    ORDER BY l.lane
    FOR SHARE OF l
),
mine AS MATERIALIZED (
    SELECT unnest(ids) AS id FROM c WHERE EXISTS (SELECT 1 FROM v)
),
u AS (
    UPDATE "{{.Outbox}}" o SET status = 'PROCESSED', hold = 0, processed_at = now()
    FROM unnest($3::bigint[]) AS i(id)
    WHERE o.id = i.id AND o.status = 'PENDING'
      AND (i.id IN (SELECT id FROM mine)) IS TRUE AND o.lane = ANY(ARRAY(SELECT lane FROM v))
    RETURNING o.id, o.lane
),
att AS (
    INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error)
    SELECT i.event_id, $1::uuid, 'DELIVERED', i.id, i.attempt, $2, $4, $5,
        'lease lost before the mark: the row was not changed'
    FROM unnest($3::bigint[], $6::uuid[], $7::int[]) AS i(id, event_id, attempt)
    WHERE i.id NOT IN (SELECT id FROM u) AND NOT EXISTS (
        SELECT 1 FROM "{{.Outbox}}_deliveries" d JOIN "{{.Outbox}}" p ON p.id = i.id
        WHERE d.token = $1::uuid AND p.status = 'PROCESSED' AND p.processed_at = d.completed_at)
    ON CONFLICT DO NOTHING
),
dlv AS (
    INSERT INTO "{{.Outbox}}_deliveries" (token, relay_id, completed_at, started_at, finished_at, lanes, delivered)
    SELECT $1::uuid, $2, now(), $4, $5, array_agg(DISTINCT lane), count(*) FROM u HAVING count(*) > 0
),
cd AS (
    DELETE FROM "{{.Outbox}}_claims" WHERE token = $1::uuid AND (ids = $8::bigint[] OR ids <@ $3::bigint[]) AND EXISTS (SELECT 1 FROM v)
),
cu AS (
    UPDATE "{{.Outbox}}_claims" SET ids = ARRAY(SELECT x FROM unnest(ids) AS x WHERE x <> ALL($3::bigint[]) ORDER BY x)
    WHERE token = $1::uuid AND NOT (ids = $8::bigint[] OR ids <@ $3::bigint[]) AND EXISTS (SELECT 1 FROM v)
)
SELECT id FROM u`

// completeExpiringSQL is completeSQL with completeExpiringTail.
var completeExpiringSQL = strings.TrimSuffix(completeSQL, "\nSELECT id FROM u") + completeExpiringTail

// completeExpiringTail replaces the last line of completeSQL for a batch
// with EXPIRED outcomes: the applied rows come back as expiredColumns, the
// payload and headers only for rows with a compensating event to enqueue.
const completeExpiringTail = `
SELECT id, event_id, aggregate_type, aggregate_id, event_type,
    CASE WHEN c THEN payload END, CASE WHEN c THEN headers END, expires_at, retry_count,
    CASE WHEN c THEN on_expired END
FROM (SELECT *, (status = 'EXPIRED' AND on_expired IS NOT NULL) AS c FROM u) u`
