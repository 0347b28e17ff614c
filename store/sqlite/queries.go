package sqlite

import (
	"embed"
	"strconv"
	"time"

	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/dialect"
)

// sqlFiles are the backend's statements, one file per step (sql/<step>.sql),
// each statement named <step>.<name>. The statements are translations of
// the PostgreSQL backend's; SQLite has one writer at a time, so where
// PostgreSQL locks rows with SKIP LOCKED, these run inside a BEGIN
// IMMEDIATE transaction that already excludes every other writer. "now" is
// always a parameter: the database clock read once at the start of the
// transaction.
//
//go:embed sql/*.sql
var sqlFiles embed.FS

// statements is the set of sqlFiles, parsed once.
var statements = sqltext.MustParseFS(sqlFiles, "sql/*.sql")

// queries holds the backend's statements, rendered with the table names
// when a store is built.
type queries struct {
	claimRead, claimsOf, laneLeases                   string
	claimEvents, insertClaim                          string
	claimDefer, claimBlock                            string
	claimRow, claimIDs, claimDelete, deadClaimRows    string
	allClaims                                         string
	completeUpdate, deadLetter, blockAfter, deferFrom string
	insertAttempts, expiredRows                       string
	reapSelect, reapUpdate, audit                     string
	expire, block, unblock                            string
	countMovable, stats, oldestPending, blockedAg     string
	deadLetterCount                                   string

	// The operator's statements (admin.go). listEvents, countMatching and
	// selectMatching are the fixed heads of statements whose WHERE is
	// written from a filter's fixed fragments and bind parameters.
	listEvents, getEvent, attempts, deadLetters string
	operatorLock, operatorRequeue               string
	operatorRequeueDead, operatorSetStatus      string
	operatorUnblock                             string
	moveDelivery, clearDelivery                 string
	countMatching, selectMatching               string
	purgePage, purgeCutoff                      string
	purgeAttempts, purgeDeadLetters             string
	purgeEvents                                 string

	// enqueueHead is the fixed head of the multi-row insert (enqueue.go),
	// whose VALUES rows are written per call from placeholders and fixed
	// expressions; eventExists tells whether event ? exists.
	enqueueHead, eventExists string

	// The schema inspection (migrate.go), the metrics (snapshot.go,
	// overdue.go), the clock and the database file (store.go, tx.go).
	countUnfinished, columnsOf     string
	snapshot, finalCounts, overdue string
	now, databaseFile              string

	// The transactions (tx.go).
	beginImmediate, beginDeferred, commit, rollback, busyTimeout string
}

// sqlDialect is SQLite's dialect, for the SQL the backends share (lanes,
// routes, admin queries). SQLite has one writer at a time: its write
// transaction already excludes every other writer, so nothing locks rows.
// Times are stored as text in the strftime format of tsSQL (time.go).
var sqlDialect = dialect.Dialect{
	Quote:   `"`,
	ClockMS: "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
	Now:     sqliteNow,
	Ago: func(m string) string {
		return "strftime('%Y-%m-%d %H:%M:%f', 'now', (-" + m + " / 1000000.0) || ' seconds')"
	},
	Minute:       func(c string) string { return "substr(" + c + ", 1, 16) || ':00'" },
	Text:         func(c string) string { return c },
	InsertIgnore: "INSERT INTO",
	Conflict:     "ON CONFLICT DO NOTHING",
	UpsertOn:     "ON CONFLICT (%s) DO UPDATE SET",
	Excluded:     "excluded.%s",
	TimeArg:      func(t time.Time) any { return formatTime(t) },
}

// names is what the statements are rendered with: the table names, TS,
// the strftime format of stored timestamps, and the fixed fragments of the
// overdue report (backend.OverdueWhere with now as ?1, and
// backend.MaxOverdueGroups).
type names struct {
	store.Tables
	TS            string
	OverdueWhere  string
	OverdueGroups string
}

// render renders a statement given as Go text, a template of
// internal/sqltext: {{.Outbox}}, {{.DeadLetters}} and {{.Attempts}} between
// double quotes are the tables, {{.TS}} the timestamp format.
func render(t store.Tables, sql string) string {
	return sqltext.MustRender(sql, namesFor(t))
}

func namesFor(t store.Tables) names {
	return names{Tables: t, TS: tsSQL, OverdueWhere: backend.OverdueWhere("?1"), OverdueGroups: strconv.Itoa(backend.MaxOverdueGroups)}
}

func buildQueries(t store.Tables) queries {
	n := namesFor(t)
	stmt := func(name string) string { return statements.MustRenderNamed(name, n) }
	return queries{
		claimRead:       stmt("claim.read"),
		claimsOf:        stmt("lanes.claims_of"),
		laneLeases:      stmt("lanes.leases"),
		claimEvents:     stmt("claim.events"),
		insertClaim:     stmt("claim.insert"),
		claimDefer:      stmt("claim.defer"),
		claimBlock:      stmt("claim.block"),
		claimRow:        render(t, claimRowSQL),
		claimIDs:        render(t, claimIDsSQL),
		claimDelete:     stmt("claim.delete"),
		allClaims:       stmt("sweep.all_claims"),
		deadClaimRows:   stmt("sweep.dead_claim_rows"),
		completeUpdate:  render(t, completeUpdateSQL),
		deadLetter:      render(t, deadLetterSQL),
		blockAfter:      render(t, blockAfterSQL),
		deferFrom:       render(t, deferSQL),
		insertAttempts:  render(t, insertAttemptsSQL),
		expiredRows:     render(t, expiredRowsSQL),
		reapSelect:      stmt("sweep.reap_select"),
		reapUpdate:      stmt("sweep.reap_update"),
		audit:           stmt("sweep.audit"),
		expire:          stmt("compensate.expire"),
		block:           stmt("sweep.block"),
		unblock:         stmt("sweep.unblock"),
		countMovable:    stmt("sweep.count_movable"),
		stats:           stmt("admin.stats"),
		oldestPending:   stmt("admin.oldest_pending"),
		blockedAg:       stmt("admin.blocked_aggregates"),
		deadLetterCount: stmt("admin.dead_letter_count"),

		listEvents:          stmt("admin.list_events"),
		getEvent:            stmt("admin.get_event"),
		attempts:            stmt("admin.attempts"),
		deadLetters:         stmt("admin.dead_letters"),
		operatorLock:        stmt("admin.operator_lock"),
		operatorRequeue:     stmt("admin.operator_requeue"),
		operatorRequeueDead: stmt("admin.operator_requeue_dead"),
		operatorSetStatus:   stmt("admin.operator_set_status"),
		operatorUnblock:     stmt("admin.operator_unblock"),
		moveDelivery:        stmt("admin.move_delivery"),
		clearDelivery:       stmt("admin.clear_delivery"),
		countMatching:       stmt("admin.count_matching"),
		selectMatching:      stmt("admin.select_matching"),
		purgePage:           stmt("admin.purge_page"),
		purgeCutoff:         stmt("admin.purge_cutoff"),
		purgeAttempts:       stmt("admin.purge_attempts"),
		purgeDeadLetters:    stmt("admin.purge_dead_letters"),
		purgeEvents:         stmt("admin.purge_events"),
		enqueueHead:         stmt("enqueue.head"),
		eventExists:         stmt("compensate.event_exists"),
		countUnfinished:     stmt("migrate.count_unfinished"),
		columnsOf:           stmt("migrate.columns_of"),
		snapshot:            stmt("snapshot.figures"),
		finalCounts:         stmt("snapshot.final_counts"),
		overdue:             stmt("overdue.groups"),
		now:                 stmt("store.now"),
		databaseFile:        stmt("tx.database_file"),
		beginImmediate:      stmt("tx.begin_immediate"),
		beginDeferred:       stmt("tx.begin_deferred"),
		commit:              stmt("tx.commit"),
		rollback:            stmt("tx.rollback"),
		busyTimeout:         stmt("tx.busy_timeout"),
	}
}

// setBusyTimeout renders tx.set_busy_timeout: the connection waits ms
// milliseconds for the write lock (an integer, formatted by the template).
func setBusyTimeout(ms int64) string {
	return statements.MustRenderNamed("tx.set_busy_timeout", struct{ MS int64 }{ms})
}

// The completion's statements (complete.go) stay Go text until the
// completion's sql/complete.sql lands; busySQL and unfinished are their
// copies of queries.busy and queries.unfinished.

// claimRowSQL reads claim ?'s lanes, their tokens and its ids, and
// claimIDsSQL sets its ids (?2) to those still held.
const claimRowSQL = `SELECT lanes, lane_tokens, ids FROM "{{.Outbox}}_claims" WHERE token = ?`

const claimIDsSQL = `UPDATE "{{.Outbox}}_claims" SET ids = ?2 WHERE token = ?1`

// completeUpdateSQL is the guarded state change of completeSQL: ?1 is now,
// ?2 the claim token, ?3 the outcomes as a JSON array of objects, ?4 the
// relay; the fence: a row changes only while PENDING, in the claim (?5,
// its ids) and in a lane still held under the claim's token (?6). A delivery marked d is recorded on the row (migration 00006):
// the relay, the claim token, the attempt number, the times (now when
// absent) and the trace id.
const completeUpdateSQL = `
WITH i AS MATERIALIZED (
    SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.kind') AS kind,
        json_extract(value, '$.err') AS err, json_extract(value, '$.retry') AS retry,
        json_extract(value, '$.block') AS block, COALESCE(json_extract(value, '$.d'), 0) AS d,
        json_extract(value, '$.attempt') AS attempt, COALESCE(json_extract(value, '$.started'), ?1) AS started,
        COALESCE(json_extract(value, '$.finished'), ?1) AS finished, json_extract(value, '$.trace_id') AS trace_id
    FROM json_each(?3)
)
UPDATE "{{.Outbox}}" AS o SET
    status = CASE i.kind
        WHEN 'DELIVERED' THEN 'PROCESSED'
        WHEN 'FAILED' THEN 'FAILED'
        WHEN 'EXPIRED' THEN 'EXPIRED'
        WHEN 'RETRY' THEN 'PENDING'
        ELSE CASE WHEN i.block THEN 'BLOCKED' ELSE 'PENDING' END END,
    retry_count = o.retry_count + CASE WHEN i.kind IN ('RETRY', 'FAILED') THEN 1 ELSE 0 END,
    processed_at = CASE WHEN i.kind IN ('DELIVERED', 'FAILED', 'EXPIRED') THEN ?1 END,
    available_at = CASE WHEN i.kind IN ('RETRY', 'RELEASED')
        THEN strftime({{.TS}}, ?1, i.retry) ELSE o.available_at END,
    last_error = CASE WHEN i.kind IN ('RETRY', 'FAILED', 'EXPIRED') THEN substr(i.err, 1, 2000) ELSE o.last_error END,
    delivered_relay_id = CASE WHEN i.d THEN ?4 ELSE o.delivered_relay_id END,
    delivered_attempt = CASE WHEN i.d THEN i.attempt ELSE o.delivered_attempt END,
    delivered_started_at = CASE WHEN i.d THEN i.started ELSE o.delivered_started_at END,
    delivered_finished_at = CASE WHEN i.d THEN i.finished ELSE o.delivered_finished_at END,
    delivered_trace_id = CASE WHEN i.d THEN i.trace_id ELSE o.delivered_trace_id END,
    delivered_token = CASE WHEN i.d THEN ?2 ELSE o.delivered_token END,
    locked_until = NULL,
    lock_token = NULL
FROM i
WHERE o.id = i.id AND o.status = 'PENDING' AND o.id IN (SELECT value FROM json_each(?5))
  AND o.lane IN (SELECT value FROM json_each(?6))
RETURNING id, aggregate_type, aggregate_id, status, available_at`

// deadLetterSQL records a newly FAILED row (?1) with its reason ?2 at ?3.
const deadLetterSQL = `
INSERT INTO "{{.DeadLetters}}" (outbox_id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, retry_count, reason, failed_at)
SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, retry_count, ?2, ?3
FROM "{{.Outbox}}" WHERE id = ?1`

// busySQL lists the rows the claims in flight hold (PROCESSING).
const busySQL = `SELECT j.value FROM "{{.Outbox}}_claims" bc, json_each(bc.ids) j`

// unfinished repeats the WHERE clause of the aggregate index: SQLite uses a
// partial index only when the query names its condition, and does not infer
// it from status = 'PENDING'.
const unfinished = `status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED')`

// blockAfterSQL holds the PENDING rows after a newly FAILED row ?3 of
// aggregate (?1, ?2) as BLOCKED; ?4 lists (JSON) the rows this completion
// itself changed, which PostgreSQL's single statement does not see as
// PENDING either.
const blockAfterSQL = `
UPDATE "{{.Outbox}}" SET status = 'BLOCKED'
WHERE aggregate_type = ?1 AND aggregate_id = ?2 AND id > ?3 AND status = 'PENDING' AND ` + unfinished + `
  AND id NOT IN (SELECT value FROM json_each(?4)) AND id NOT IN (` + busySQL + `)`

// deferSQL pushes back the PENDING rows after a retried row ?3 of aggregate
// (?1, ?2) to its new available_at ?4; ?5 as in blockAfterSQL.
const deferSQL = `
UPDATE "{{.Outbox}}" SET available_at = ?4
WHERE aggregate_type = ?1 AND aggregate_id = ?2 AND id > ?3 AND status = 'PENDING' AND ` + unfinished + `
  AND available_at < ?4 AND id NOT IN (SELECT value FROM json_each(?5)) AND id NOT IN (` + busySQL + `)`

// insertAttemptsSQL writes one attempt row per element of ?3 (claim token
// ?1, relay ?2); a replay conflicts and writes nothing, and so does the
// replay of a delivery recorded on its row (marked replay: the row is
// PROCESSED with its delivery under ?1).
const insertAttemptsSQL = `
INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error, trace_id)
SELECT json_extract(value, '$.event_id'), ?1, json_extract(value, '$.kind'), json_extract(value, '$.id'),
    json_extract(value, '$.attempt'), ?2, json_extract(value, '$.started'), json_extract(value, '$.finished'),
    json_extract(value, '$.error'), json_extract(value, '$.trace_id')
FROM json_each(?3)
WHERE NOT (COALESCE(json_extract(value, '$.replay'), 0) AND EXISTS (SELECT 1 FROM "{{.Outbox}}" p
    WHERE p.id = json_extract(value, '$.id') AND p.status = 'PROCESSED' AND p.delivered_token = ?1))
ON CONFLICT DO NOTHING`
