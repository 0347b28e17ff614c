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
	countAttempt, replayAggregates              string
	replayRows, replayHeld                      string
	purgePage, purgeCutoff                      string
	purgeAttempts, purgeDeadLetters             string
	purgeEvents                                 string

	// The history's statements (admin_history.go).
	historyPage, historyInsertEvents, historyInsertAttempts string
	historyDeleteAttempts, historyDeleteEvents              string
	historyMonths, historyDropEvents, historyDropAttempts   string
	historyRecordDrop, historyGetEvent, historyAttempts     string

	// enqueueHead is the fixed head of the multi-row insert (enqueue.go),
	// whose VALUES rows are written per call from placeholders and fixed
	// expressions; eventExists tells whether event ? exists.
	enqueueHead, eventExists string
	// eventTypes counts the unfinished events by type (fanout.go).
	eventTypes string

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
		claimDelete:     stmt("claim.delete"),
		complete:        buildCompleteSQL(t),
		allClaims:       stmt("sweep.all_claims"),
		deadClaimRows:   stmt("sweep.dead_claim_rows"),
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
		countAttempt:        stmt("admin.count_attempt"),
		replayAggregates:    stmt("admin.replay_aggregates"),
		replayRows:          stmt("admin.replay_rows"),
		replayHeld:          stmt("admin.replay_held"),
		selectMatching:      stmt("admin.select_matching"),
		purgePage:           stmt("admin.purge_page"),
		purgeCutoff:         stmt("admin.purge_cutoff"),
		purgeAttempts:       stmt("admin.purge_attempts"),
		purgeDeadLetters:    stmt("admin.purge_dead_letters"),
		purgeEvents:         stmt("admin.purge_events"),

		historyPage:           stmt("admin_history.page"),
		historyInsertEvents:   stmt("admin_history.insert_events"),
		historyInsertAttempts: stmt("admin_history.insert_attempts"),
		historyDeleteAttempts: stmt("admin_history.delete_attempts"),
		historyDeleteEvents:   stmt("admin_history.delete_events"),
		historyMonths:         stmt("admin_history.months"),
		historyDropEvents:     stmt("admin_history.drop_events"),
		historyDropAttempts:   stmt("admin_history.drop_attempts"),
		historyRecordDrop:     stmt("admin_history.record_drop"),
		historyGetEvent:       stmt("admin_history.get_event"),
		historyAttempts:       stmt("admin_history.attempts"),
		enqueueHead:           stmt("enqueue.head"),
		eventExists:           stmt("compensate.event_exists"),
		eventTypes:            stmt("fanout.event_types"),
		countUnfinished:       stmt("migrate.count_unfinished"),
		columnsOf:             stmt("migrate.columns_of"),
		snapshot:              stmt("snapshot.figures"),
		finalCounts:           stmt("snapshot.final_counts"),
		overdue:               stmt("overdue.groups"),
		now:                   stmt("store.now"),
		databaseFile:          stmt("tx.database_file"),
		beginImmediate:        stmt("tx.begin_immediate"),
		beginDeferred:         stmt("tx.begin_deferred"),
		commit:                stmt("tx.commit"),
		rollback:              stmt("tx.rollback"),
		busyTimeout:           stmt("tx.busy_timeout"),
	}
}

// setBusyTimeout renders tx.set_busy_timeout: the connection waits ms
// milliseconds for the write lock (an integer, formatted by the template).
func setBusyTimeout(ms int64) string {
	return statements.MustRenderNamed("tx.set_busy_timeout", struct{ MS int64 }{ms})
}
