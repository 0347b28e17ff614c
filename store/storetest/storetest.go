// Package storetest is the Store conformance suite every store backend
// runs: storetest.Run(t, newHarness). It checks the Store contract
// directly, without a relay or a sink: the declared Features (against
// Harness.Promises), atomic enqueue, claims and their order, fencing,
// outcomes, expiry, sweeps, snapshots, routes and operator actions. The guarantees that need the real relay over the store (no
// loss, per-aggregate order, bounded duplicates under failures) are in
// relay/relaytest, which runs on the same Harness.
package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/store"
)

// Tx is a producer's transaction in the backend's own driver.
type Tx interface {
	Enqueue(ctx context.Context, events ...outbox.Event) ([]outbox.EventID, error)
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// Harness adapts one backend to the suite.
type Harness struct {
	// Store is migrated, on a table of its own.
	Store store.Store
	// Begin opens a producer transaction.
	Begin func(ctx context.Context) (Tx, error)
	// NewStore opens a second Store on the same tables with another
	// configuration (for limits); nil if not supported.
	NewStore func(t *testing.T, limits outbox.Limits) store.Store
	// NewTable returns a harness on another new, migrated outbox table of
	// the same database (and schema), for the fan-out's copies from one
	// table into another (RunFanOut); nil if not supported.
	NewTable func(t *testing.T) *Harness
	// SingleWriter: the database serializes write transactions (SQLite),
	// so producers cannot hold several open at once.
	SingleWriter bool
	// Scale multiplies the event counts of the heavier tests (1 = full).
	Scale float64
	// SQL is a database/sql handle on the store's database, for the
	// producers that write the outbox table with plain SQL
	// (docs/PRODUCERS.md); Table names that table, and Bind rewrites the
	// suite's ? placeholders for the backend ($1, $2 ... on PostgreSQL; nil
	// keeps them). The producer tests are skipped when SQL is nil.
	SQL   *sql.DB
	Table string
	Bind  func(query string) string
	// NoDeadlineTiming, when set, says why the backend cannot be timed
	// against second-scale deadlines in this build (SQLite under the race
	// detector): the tests that count deadlines met under a backlog skip,
	// saying so. The claim-order tests of the same features still run.
	NoDeadlineTiming string
	// LoseClaimAnswers, when set, makes Store's next n claims commit and
	// then return an error, as a claim does whose deadline or connection
	// ends while its result is read after the commit.
	LoseClaimAnswers func(n int)
	// Conflict, when set, reports whether err, from a producer's
	// transaction, is a lock conflict that left the transaction uncommitted
	// (a deadlock on MySQL, rolled back; the write lock not had within
	// busy_timeout on SQLite): an application retries such a transaction as
	// a whole, and so do the producer tests.
	Conflict func(err error) bool
	// Sealing returns a way to open producer transactions, on the same
	// tables, whose Enqueue seals payloads with ring (the backend's
	// Config.Encryption). The encryption tests fail without it.
	Sealing func(t *testing.T, ring *encrypt.Keyring) func(ctx context.Context) (Tx, error)
	// SetFinishedAt sets the finish time (processed_at) of event id in the
	// hot table by SQL, for the history's tests of months in the past; nil
	// skips them.
	SetFinishedAt func(t testing.TB, id outbox.EventID, at time.Time)
	// Promises lists the optional capabilities the backend promises;
	// RunFeatures checks that Store.Features declares exactly these.
	Promises Capabilities
}

// Factory returns a fresh harness on new tables; it registers its own cleanup.
type Factory func(t *testing.T) *Harness

// Run runs the whole suite.
func Run(t *testing.T, newHarness Factory) {
	t.Run("Features", func(t *testing.T) { RunFeatures(t, newHarness) })
	t.Run("Store", func(t *testing.T) { RunStore(t, newHarness) })
	t.Run("Snapshot", func(t *testing.T) { RunSnapshot(t, newHarness) })
	t.Run("Requeue", func(t *testing.T) { RunRequeue(t, newHarness) })
	t.Run("Replay", func(t *testing.T) { RunReplay(t, newHarness) })
	t.Run("Producers", func(t *testing.T) { RunProducers(t, newHarness) })
	t.Run("Routes", func(t *testing.T) { RunRoutes(t, newHarness) })
	t.Run("DataKeys", func(t *testing.T) { RunDataKeys(t, newHarness) })
	t.Run("Sealing", func(t *testing.T) { RunSealing(t, newHarness) })
	t.Run("Deadlines", func(t *testing.T) { RunDeadlines(t, newHarness) })
	t.Run("StoreGuarantees", func(t *testing.T) { RunStoreGuarantees(t, newHarness) })
	t.Run("FanOut", func(t *testing.T) { RunFanOut(t, newHarness) })
	t.Run("AdminQueries", func(t *testing.T) { RunAdminQueries(t, newHarness) })
	t.Run("AuditChain", func(t *testing.T) { RunAuditChain(t, newHarness) })
	t.Run("Receipts", func(t *testing.T) { RunReceipts(t, newHarness) })
	t.Run("History", func(t *testing.T) { RunHistory(t, newHarness) })
}

var tableSeq atomic.Int64

// TableName returns a table name unique within the test binary run, for
// harnesses to use.
func TableName(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, time.Now().UnixNano()%1e9, tableSeq.Add(1))
}

// Enqueue writes events in one committed transaction of h, failing the
// test if it cannot, and returns their ids.
func Enqueue(t testing.TB, h *Harness, events ...outbox.Event) []outbox.EventID {
	t.Helper()
	return EnqueueIn(t, h.Begin, events...)
}

// EnqueueIn writes events in one committed transaction that begin opens.
func EnqueueIn(t testing.TB, begin func(ctx context.Context) (Tx, error), events ...outbox.Event) []outbox.EventID {
	t.Helper()
	ctx := context.Background()
	tx, err := begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	ids, err := tx.Enqueue(ctx, events...)
	if err != nil {
		_ = tx.Rollback(ctx)
		t.Fatalf("enqueue: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return ids
}

// PaymentEvent returns a valid event of aggregate payment/<aggregateID>
// whose payload names the aggregate and n.
func PaymentEvent(aggregateID string, n int) outbox.Event {
	return outbox.Event{
		AggregateType: "payment",
		AggregateID:   aggregateID,
		EventType:     "ApprovalRequested",
		Payload:       []byte(fmt.Sprintf(`{"aggregate":%q,"n":%d}`, aggregateID, n)),
	}
}

// Scaled is n multiplied by the harness's Scale, at least 1: the size of
// a heavier test on a slower backend.
func Scaled(h *Harness, n int) int {
	if h.Scale <= 0 || h.Scale >= 1 {
		return n
	}
	return max(1, int(float64(n)*h.Scale))
}

// CountStatus returns how many events of s have status, failing the test
// if the store cannot say.
func CountStatus(t testing.TB, s store.Store, status outbox.Status) int64 {
	t.Helper()
	st, err := s.Stats(context.Background(), true)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	return st.Counts[status]
}

// DropMySQLTables drops every table of the outbox named table in db's
// current database, as pgtest.DropTables (internal/testenv/pgtest) does on
// PostgreSQL.
func DropMySQLTables(ctx context.Context, db *sql.DB, table string) error {
	if err := store.ValidateTable(table); err != nil {
		return err
	}
	rows, err := db.QueryContext(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = DATABASE() AND (table_name = ? OR table_name LIKE ?)`,
		table, strings.ReplaceAll(table, "_", `\_`)+`\_%`)
	if err != nil {
		return err
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		names = append(names, n)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	for _, n := range names {
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS `"+n+"`"); err != nil {
			return err
		}
	}
	return nil
}

// FuzzTable returns the table name for a fuzz target's harness:
// fuzz_<unix seconds>_<pid>. The fuzzing engine may stop a worker in the
// middle of an iteration, before its cleanup ran; the next run drops the
// tables such a worker left (StaleFuzzTable).
func FuzzTable() string {
	return fmt.Sprintf("fuzz_%d_%d", time.Now().Unix(), os.Getpid())
}

var fuzzTableName = regexp.MustCompile(`^fuzz_([0-9]+)_[0-9]+$`)

// StaleFuzzTable reports whether name is an outbox table that FuzzTable
// named more than 10 minutes before now: no fuzz run lasts that long, so
// its owner is gone.
func StaleFuzzTable(name string, now time.Time) bool {
	m := fuzzTableName.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	sec, err := strconv.ParseInt(m[1], 10, 64)
	return err == nil && now.Sub(time.Unix(sec, 0)) > 10*time.Minute
}

// DropStaleFuzzTables drops, with drop, each of names (the backend's tables
// that look like FuzzTable's) that StaleFuzzTable reports stale: the tables
// of fuzz workers stopped before their cleanup. A failed drop is logged, not
// fatal, since another run may be dropping the same table.
func DropStaleFuzzTables(t testing.TB, names []string, drop func(name string) error) {
	now := time.Now()
	for _, name := range names {
		if !StaleFuzzTable(name, now) {
			continue
		}
		if err := drop(name); err != nil {
			t.Logf("dropping the stale fuzz table %s: %v", name, err)
		}
	}
}
