package mysql

import (
	_ "embed"
	"strconv"
	"strings"

	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/snapshotsql"
)

// queriesSQL holds the fixed SQL of the store, named statements in the
// template syntax of the migrations (internal/sqltext). The statements
// of the claim, the completion, the sweeps, the compensation and the purge
// take fixed fragments that vary from call to call (window sizes, id
// lists, CASE arms, SET lists, VALUES rows); they are rendered per call by
// the methods below. The others are rendered once, with the table names,
// when the store is built.
//
//go:embed queries.sql
var queriesSQL string

// statements is queriesSQL, parsed once.
var statements = sqltext.MustParse("queries.sql", queriesSQL)

// queries holds the statements rendered with the table names.
type queries struct {
	t                                     store.Tables
	reapSelect, expireSelect              string
	blockCandidates, unblockCandidates    string
	countMovable, stats, oldestPending    string
	blockedAg, deadLetterCount, getRecord string
	overdue, busyPending, rowBusy         string
	snapshot                              snapshotsql.Dialect

	// The lanes' claim (claim.go, lanes.go): the heads of the read's
	// statements, completed per call, and the claims table's statements.
	claimLaneHead, claimAllHead, claimDeadlineHead string
	claimOwnHead, claimRunHead                     string
	claimsOf, claimInsert                          string
	allClaims, allLanes, deadClaimRows             string
	complete                                       completeSQL

	// The operator's statements (admin.go).
	listEvents, countMatching, selectMatching string
	attempts, deadLetters                     string
	operatorLock, operatorRequeue             string
	operatorRequeueDead, operatorSetStatus    string
	operatorAudit, operatorFirstFailed        string
	operatorBlocked, operatorBlockedBefore    string
	moveDelivery, clearDelivery               string

	// The fixed heads of the producer's multi-row inserts (enqueue.go),
	// whose VALUES lists are written per call from placeholders.
	enqueueHead, lockAggregatesHead string
}

// queryNames is what the statements are rendered with once: the table
// names and fixed fragments (the columns of a record, and the condition
// and size of the overdue report).
type queryNames struct {
	store.Tables
	sqlExprs
	RecordColumns  string
	AttemptColumns string
	OverdueWhere   string
	OverdueGroups  int
}

func buildQueries(t store.Tables) queries {
	n := queryNames{Tables: t, RecordColumns: sqltext.MustRender(recordColumns, t), AttemptColumns: attemptColumns,
		OverdueWhere:  backend.OverdueWhere("UTC_TIMESTAMP(6)"),
		OverdueGroups: backend.MaxOverdueGroups}
	render := func(name string) string { return statements.MustRenderNamed(name, n) }
	return queries{
		t:                 t,
		reapSelect:        render("reap_select"),
		expireSelect:      render("expire_select"),
		blockCandidates:   render("block_candidates"),
		unblockCandidates: render("unblock_candidates"),
		countMovable:      render("count_movable"),
		stats:             render("stats"),
		oldestPending:     render("oldest_pending"),
		blockedAg:         render("blocked_aggregates"),
		deadLetterCount:   render("dead_letter_count"),
		getRecord:         render("get_record"),
		overdue:           render("overdue"),
		busyPending:       render("busy_pending"),
		rowBusy:           render("row_busy"),
		claimLaneHead:     render("claim_lane_head"),
		claimAllHead:      render("claim_all_head"),
		claimDeadlineHead: render("claim_deadline_head"),
		claimOwnHead:      render("claim_own_head"),
		claimRunHead:      render("claim_run_head"),
		claimsOf:          render("claims_of"),
		claimInsert:       render("claim_insert"),
		complete:          buildCompleteSQL(t),
		allClaims:         render("all_claims"),
		allLanes:          render("all_lanes"),
		snapshot:          snapshotDialect(t, render("blocked_aggregates")),

		listEvents:            render("list_events"),
		countMatching:         render("count_matching"),
		selectMatching:        render("select_matching"),
		attempts:              render("attempts"),
		deadLetters:           render("dead_letters"),
		operatorLock:          render("operator_lock"),
		operatorRequeue:       render("operator_requeue"),
		operatorRequeueDead:   render("operator_requeue_dead"),
		operatorSetStatus:     render("operator_set_status"),
		operatorAudit:         render("operator_audit"),
		operatorFirstFailed:   render("operator_first_failed"),
		operatorBlocked:       render("operator_blocked"),
		operatorBlockedBefore: render("operator_blocked_before"),
		moveDelivery:          render("move_delivery"),
		clearDelivery:         render("clear_delivery"),
		enqueueHead:           render("enqueue_head"),
		lockAggregatesHead:    render("lock_aggregates_head"),
	}
}

// idsParams render a statement over the rows IDs (idList).
type idsParams struct {
	store.Tables
	IDs string
}

// byIDs renders one of the statements over an id list: claim_events,
// dead_claim_rows or expire_update.
func (q *queries) byIDs(name string, ids []int64) (string, error) {
	return statements.RenderNamed(name, idsParams{Tables: q.t, IDs: idList(ids)})
}

// fragments render the statements with per-call fragments, each written
// in Go from integers, placeholders and fixed SQL, never from input: In the
// final statuses a purge deletes (store status names, validated constants,
// quoted), IDs an id list (idList), Marks a list of placeholders, Cases the
// WHEN arms of a CASE on id (integers and placeholders), Sets a SET list of
// fixed assignments, Cond an OR of fixed conditions with placeholders, and
// Values the rows of a multi-row insert, placeholders only.
type fragments struct {
	store.Tables
	sqlExprs
	In, IDs, Marks, Cases, Sets, Cond, Values string
}

// render renders the statement name of queries.sql with the per-call
// fragments f.
func (q *queries) render(name string, f fragments) (string, error) {
	f.Tables = q.t
	return statements.RenderNamed(name, f)
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

// recordColumns are the columns of a store.Record, from record_from: a
// PENDING row that a claim holds (cl) is PROCESSING, until the lease of its
// lane, under the claim's token; a row PROCESSING under a lease of the
// schema before lanes keeps its own.
const recordColumns = `o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.headers,
    CASE WHEN o.status = 'PENDING' AND cl.cid IS NOT NULL THEN 'PROCESSING' ELSE o.status END,
    o.retry_count, o.created_at, o.processed_at, o.available_at, o.expires_at,
    COALESCE(o.locked_until, CASE WHEN o.status = 'PENDING' AND cl.cid IS NOT NULL THEN
        (SELECT TIMESTAMPADD(MICROSECOND, l.lease_until_ms * 1000, CAST('1970-01-01 00:00:00' AS DATETIME(6)))
         FROM ` + "`{{.Outbox}}_lanes`" + ` l WHERE l.lane = o.lane) END),
    COALESCE(o.lock_token, CASE WHEN o.status = 'PENDING' THEN cl.token END), o.last_error`

// sqlExprs are the fixed expressions the statements share.
type sqlExprs struct{}

// nowMS is the database clock in Unix milliseconds, whatever the session's
// time zone (lanes.MySQL's NowMS selects the same).
const nowMS = "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED)"

// NowMS renders nowMS.
func (sqlExprs) NowMS() string { return nowMS }

// LaneOf renders the lane of a row's aggregate (laneOf).
func (sqlExprs) LaneOf() string { return laneOf("") }

// laneOf renders the lane of the aggregate whose columns are prefixed p
// ("", "NEW." or "o."): the first byte of MD5(aggregate_type ':'
// aggregate_id), the text in utf8mb4 (0x3A is ':'), modulo 64, as
// PostgreSQL computes it. It holds no quote, so that a migration can write
// it inside a prepared statement's text.
func laneOf(p string) string {
	return "CAST(CONV(SUBSTRING(MD5(CONCAT(CONVERT(" + p + "aggregate_type USING utf8mb4), 0x3A, CONVERT(" + p +
		"aggregate_id USING utf8mb4))), 1, 2), 16, 10) AS UNSIGNED) % 64"
}

// attemptColumns are the columns of an attempt row, in the order
// insertAttempts writes them.
const attemptColumns = "event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, `error`"
