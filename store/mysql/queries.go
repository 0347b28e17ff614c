package mysql

import (
	"database/sql"
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

// sqlFiles hold the fixed SQL of the store, one file per step
// (sql/<step>.sql), named statements <step>.<name> in the template syntax
// of the migrations (internal/sqltext). The statements of the
// claim, the completion, the sweeps, the compensation and the purge take
// fixed fragments that vary from call to call (window sizes, id lists,
// CASE arms, SET lists, VALUES rows); they are rendered per call by the
// methods below. The others are rendered once, with the table names, when
// the store is built.
//
//go:embed sql/*.sql
var sqlFiles embed.FS

// statements is sqlFiles, parsed once.
var statements = sqltext.MustParseFS(sqlFiles, "sql/*.sql")

// queries holds the statements rendered with the table names.
type queries struct {
	t                                     store.Tables
	reapSelect, expireSelect              string
	blockCandidates, unblockCandidates    string
	countMovable, stats, oldestPending    string
	blockedAg, deadLetterCount, getRecord string
	overdue, busyPending, rowBusy         string
	snapshot                              snapshotsql.Statements

	// The lanes' claim (claim.go, lanes.go): the heads of the read's
	// statements, completed per call, and the claims table's statements.
	claimLaneHead, claimAllHead, claimDeadlineHead string
	claimOwnHead, claimClock, claimIDsHead         string
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
	countAttempt, replayAggregates            string
	replayRows, replayHeld                    string

	// The fixed heads of the producer's multi-row inserts (enqueue.go),
	// whose VALUES lists are written per call from placeholders.
	enqueueHead, lockAggregatesHead, lockAggregatesTail string
	// eventTypes counts the unfinished events by type (fanout.go).
	eventTypes string
}

// sqlDialect is MySQL's dialect, for the SQL the backends share (lanes,
// routes, snapshot, admin queries). The clock is UTC_TIMESTAMP(6) counted
// from the epoch: unlike UNIX_TIMESTAMP(NOW()), it does not go through the
// session's time zone, which repeats an hour when daylight saving time
// ends. A snapshot scans the clock as DATETIME(6) in UTC, the ages as
// microseconds (NULL for none), and the event ids as text.
var sqlDialect = dialect.Dialect{
	Quote:        "`",
	ClockMS:      "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED)",
	Now:          "UTC_TIMESTAMP(6)",
	Ago:          func(m string) string { return "UTC_TIMESTAMP(6) - INTERVAL " + m + " MICROSECOND" },
	Minute:       func(c string) string { return "DATE_FORMAT(" + c + ", '%Y-%m-%d %H:%i:00')" },
	Text:         func(c string) string { return c },
	Integer:      "SIGNED",
	InsertIgnore: "INSERT IGNORE INTO",
	UpsertOn:     "ON DUPLICATE KEY UPDATE",
	Excluded:     "VALUES(%s)",
	Lock:         "FOR UPDATE",
	SkipLocked:   "SKIP LOCKED",
	TimeArg:      func(t time.Time) any { return t.UTC() },
	ScanClock: func() (any, func() time.Time) {
		var now nullTime
		return &now, func() time.Time { return now.Time }
	},
	ScanAge: func() (any, func() time.Duration) {
		var micros sql.NullInt64
		return &micros, func() time.Duration { return max(time.Duration(micros.Int64)*time.Microsecond, 0) }
	},
	ScanEventID: func(id *outbox.EventID) (any, func()) { return id, nil },
}

// queryNames is what the statements are rendered with once: the table
// names and fixed fragments (the columns of a record, and the condition
// and size of the overdue report).
type queryNames struct {
	store.Tables
	sqlExprs
	OverdueWhere  string
	OverdueGroups int
}

func buildQueries(t store.Tables) queries {
	n := queryNames{Tables: t,
		OverdueWhere:  backend.OverdueWhere("UTC_TIMESTAMP(6)"),
		OverdueGroups: backend.MaxOverdueGroups}
	render := func(name string) string { return statements.MustRenderNamed(name, n) }
	return queries{
		t:                 t,
		reapSelect:        render("sweep.reap_select"),
		expireSelect:      render("sweep.expire_select"),
		blockCandidates:   render("sweep.block_candidates"),
		unblockCandidates: render("sweep.unblock_candidates"),
		countMovable:      render("sweep.count_movable"),
		stats:             render("admin.stats"),
		oldestPending:     render("admin.oldest_pending"),
		blockedAg:         render("admin.blocked_aggregates"),
		deadLetterCount:   render("admin.dead_letter_count"),
		getRecord:         render("admin.get_record"),
		overdue:           render("overdue.groups"),
		busyPending:       render("admin.busy_pending"),
		rowBusy:           render("admin.row_busy"),
		claimLaneHead:     render("claim.lane_head"),
		claimAllHead:      render("claim.all_head"),
		claimDeadlineHead: render("claim.deadline_head"),
		claimOwnHead:      render("claim.own_head"),
		claimIDsHead:      render("claim.ids_head"),
		claimClock:        render("claim.clock"),
		claimsOf:          render("lanes.claims_of"),
		claimInsert:       render("claim.insert"),
		complete:          buildCompleteSQL(t),
		allClaims:         render("sweep.all_claims"),
		allLanes:          render("sweep.all_lanes"),
		snapshot:          snapshotStatements(render),

		listEvents:            render("admin.list_events"),
		countMatching:         render("admin.count_matching"),
		selectMatching:        render("admin.select_matching"),
		countAttempt:          render("admin.count_attempt"),
		replayAggregates:      render("admin.replay_aggregates"),
		replayRows:            render("admin.replay_rows"),
		replayHeld:            render("admin.replay_held"),
		attempts:              render("admin.attempts"),
		deadLetters:           render("admin.dead_letters"),
		operatorLock:          render("admin.operator_lock"),
		operatorRequeue:       render("admin.operator_requeue"),
		operatorRequeueDead:   render("admin.operator_requeue_dead"),
		operatorSetStatus:     render("admin.operator_set_status"),
		operatorAudit:         render("admin.operator_audit"),
		operatorFirstFailed:   render("admin.operator_first_failed"),
		operatorBlocked:       render("admin.operator_blocked"),
		operatorBlockedBefore: render("admin.operator_blocked_before"),
		moveDelivery:          render("admin.move_delivery"),
		clearDelivery:         render("admin.clear_delivery"),
		enqueueHead:           render("enqueue.head"),
		lockAggregatesHead:    render("enqueue.lock_aggregates_head"),
		lockAggregatesTail:    render("enqueue.lock_aggregates_tail"),
		eventTypes:            render("fanout.event_types"),
	}
}

// stmt renders the fixed statement name with the table names t, per call:
// for the statements a store runs seldom (the schema's, the server's).
func stmt(name string, t store.Tables) string {
	return statements.MustRenderNamed(name, t)
}

// idsParams render a statement over the rows IDs (idList).
type idsParams struct {
	store.Tables
	IDs string
}

// byIDs renders one of the statements over an id list, such as
// claim.events or sweep.expire_update.
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

// render renders the statement name of sqlFiles with the per-call
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

// sqlExprs are the fixed expressions the statements share.
type sqlExprs struct{}

// NowMS renders the dialect's ClockMS.
func (sqlExprs) NowMS() string { return sqlDialect.ClockMS }

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
