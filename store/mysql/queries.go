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
	overdue                               string
	snapshot                              snapshotsql.Dialect

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
	RecordColumns  string
	AttemptColumns string
	OverdueWhere   string
	OverdueGroups  int
}

func buildQueries(t store.Tables) queries {
	n := queryNames{Tables: t, RecordColumns: recordColumns, AttemptColumns: attemptColumns,
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

// windowParams render the claim's window: Limit rows in id order and, when
// EDF > 0, EDF rows with the nearest deadlines.
type windowParams struct {
	store.Tables
	Limit, EDF int
}

// window renders the claim's first read (window, or edf_window).
func (q *queries) window(limit, edf int) (string, error) {
	p := windowParams{Tables: q.t, Limit: limit, EDF: edf}
	if edf > 0 {
		return statements.RenderNamed("edf_window", p)
	}
	return statements.RenderNamed("window", p)
}

// runsParams render the claim's second read: Window and First are id
// lists (idList), Own the placeholders of the relay's claims in flight
// ("" for none).
type runsParams struct {
	store.Tables
	FailedBlocks       bool
	Window, First, Own string
}

// runs renders the claim's second read.
func (q *queries) runs(failedBlocks bool, window, first []int64, own int) (string, error) {
	p := runsParams{Tables: q.t, FailedBlocks: failedBlocks, Window: idList(window), First: idList(first)}
	if own > 0 {
		p.Own = "?" + strings.Repeat(",?", own-1)
	}
	return statements.RenderNamed("runs", p)
}

// idsParams render a statement over the rows IDs (idList).
type idsParams struct {
	store.Tables
	IDs string
}

// byIDs renders one of the statements over an id list: lock_claim,
// complete_lock, delivered_replays or expire_update.
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

// recordColumns are the columns of a store.Record.
const recordColumns = `id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, status,
    retry_count, created_at, processed_at, available_at, expires_at, locked_until, lock_token, last_error`

// attemptColumns are the columns of an attempt row, in the order
// insertAttempts writes them.
const attemptColumns = "event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, `error`"
