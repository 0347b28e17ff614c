package postgres

import (
	"embed"
	"strconv"
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
// built.
type queries struct {
	readClaim, readClaimIDs, claims, commitClaim  string
	complete                                      completeSQL
	reap, reapClaims, expire, block, unblock      string
	countMovable, stats, oldestPending, blockedAg string
	deadLetterCount                               string
	purge, purgeDeliveries, overdue, missingIDs   string
	attempts, moveDelivery                        string

	// The history's statements (admin_history.go) that name no month.
	historyMove, historyMonths, historyPurgeDeliveries   string
	historyNow, historyPartitions, historyRecordDrop     string
	historyGetEvent, historyAttempts, historyLockTimeout string
	idOrder, scanBehind                                  string
	snapshot                                             snapshotsql.Statements

	// The operator's statements (admin.go). listEvents, countMatching and
	// selectMatching are the fixed heads of statements whose WHERE is
	// written from a filter's fixed fragments and bind parameters.
	listEvents, getEvent, deadLetters      string
	operatorLock, operatorRequeue          string
	operatorRequeueDead, operatorSetStatus string
	operatorAudit, operatorUnblock         string
	countMatching, selectMatching          string
	moveBatchDelivery, countAttempt        string
	replayAggregates, replayRows           string
	replayHeld                             string

	// enqueueHead is the fixed head of the multi-row insert (enqueue.go),
	// whose VALUES list is written per call from placeholders and casts.
	enqueueHead, enqueueTail, enqueueLockedTail string
	existingEvents, compensatedAttempts         string
	// outboxName is the quoted outbox table as a regclass text, a bind
	// parameter of the analyze check; analyze analyzes the table.
	outboxName, analyze, analyzeStale string
	// eventTypes counts the unfinished events by type (fanout.go).
	eventTypes string
}

// render renders a statement with the table names.
func render(t store.Tables, sql string) string { return sqltext.MustRender(sql, t) }

// placeholder renders the n-th bind parameter, from 1.
func placeholder(n int) string { return "$" + strconv.Itoa(n) }

func buildQueries(t store.Tables) queries {
	n := names{Tables: t, OverdueWhere: "hold > 0 AND " + backend.OverdueWhere("now()"), OverdueGroups: backend.MaxOverdueGroups}
	stmt := func(name string) string { return statements.MustRenderNamed(name, n) }
	return queries{
		readClaim:       stmt("claim.read"),
		readClaimIDs:    stmt("claim.read_ids"),
		claims:          stmt("claim.claims"),
		idOrder:         stmt("behind.id_order"),
		scanBehind:      stmt("behind.scan"),
		commitClaim:     stmt("claim.commit"),
		reapClaims:      stmt("sweep.reap_claims"),
		complete:        buildCompleteSQL(t),
		reap:            stmt("sweep.reap"),
		expire:          stmt("compensate.expire"),
		block:           stmt("sweep.block"),
		unblock:         stmt("sweep.unblock"),
		countMovable:    stmt("sweep.count_movable"),
		stats:           stmt("admin.stats"),
		oldestPending:   stmt("admin.oldest_pending"),
		blockedAg:       stmt("admin.blocked_aggregates"),
		deadLetterCount: stmt("admin.dead_letter_count"),
		purge:           stmt("admin.purge"),
		purgeDeliveries: stmt("admin.purge_deliveries"),
		attempts:        stmt("admin.attempts"),
		moveDelivery:    stmt("admin.move_delivery"),

		historyMove:            stmt("admin_history.move"),
		historyMonths:          stmt("admin_history.months"),
		historyPurgeDeliveries: stmt("admin_history.purge_deliveries"),
		historyNow:             stmt("admin_history.now"),
		historyPartitions:      stmt("admin_history.partitions"),
		historyRecordDrop:      stmt("admin_history.record_drop"),
		historyGetEvent:        stmt("admin_history.get_event"),
		historyAttempts:        stmt("admin_history.attempts"),
		historyLockTimeout:     stmt("admin_history.lock_timeout"),
		overdue:                stmt("overdue.groups"),
		missingIDs:             stmt("claim.missing_ids"),
		snapshot:               snapshotStatements(stmt),

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
		moveBatchDelivery:   stmt("admin.move_batch_delivery"),
		countAttempt:        stmt("admin.count_attempt"),
		replayAggregates:    stmt("admin.replay_aggregates"),
		replayRows:          stmt("admin.replay_rows"),
		replayHeld:          stmt("admin.replay_held"),

		enqueueHead:         stmt("enqueue.head"),
		enqueueTail:         stmt("enqueue.tail"),
		enqueueLockedTail:   stmt("enqueue.locked_tail"),
		existingEvents:      stmt("compensate.existing_events"),
		compensatedAttempts: stmt("compensate.attempts"),
		outboxName:          stmt("analyze.outbox_name"),
		analyze:             stmt("analyze.outbox"),
		analyzeStale:        stmt("analyze.stale"),
		eventTypes:          stmt("fanout.event_types"),
	}
}
