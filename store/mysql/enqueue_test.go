package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" driver, for the plain-DSN harness

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/mysql"
	"github.com/txoutbox/outbox/store/storetest"
)

func payment(agg string, n int) outbox.Event {
	return outbox.Event{AggregateType: "payment", AggregateID: agg, EventType: "ApprovalRequested",
		Payload: []byte(fmt.Sprintf(`{"n":%d}`, n))}
}

// lockWaiting reports whether connection conn is inside Enqueue's lock
// statement. (information_schema.innodb_trx does not always list the wait:
// for a one-row primary-key lookup MariaDB reads, and locks, the row while
// optimizing the statement, in state "Statistics".)
func lockWaiting(ctx context.Context, db *sql.DB, conn int64) (bool, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.processlist
        WHERE id = ? AND info LIKE 'INSERT INTO %\\_aggregates%'`, conn).Scan(&n)
	return n > 0, err
}

func claimAll(t *testing.T, s store.Store) []store.Claimed {
	t.Helper()
	c, err := s.Claim(context.Background(), store.ClaimRequest{RelayID: "t", Limit: 100, Lease: time.Minute, FailedBlocks: true})
	if err != nil {
		t.Fatal(err)
	}
	return c.Events
}

// TestAggregateLockSerializesProducers: a second transaction that enqueues
// for the same aggregate waits until the first ends, so id order is commit
// order and the relay never sees the later event alone.
func TestAggregateLockSerializesProducers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{})
	t1, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer t1.Rollback()
	first, err := s.Enqueue(ctx, t1, payment("tx-1", 1))
	if err != nil {
		t.Fatal(err)
	}
	t2, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer t2.Rollback()
	var conn2 int64
	if err := t2.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&conn2); err != nil {
		t.Fatal(err)
	}
	// Another aggregate is not held up.
	if _, err := s.Enqueue(ctx, t2, payment("tx-2", 1)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var second []outbox.EventID
	go func() {
		var err error
		second, err = s.Enqueue(ctx, t2, payment("tx-1", 2))
		done <- err
	}()
	wait.Until(t, 30*time.Second, "the second producer to wait for the aggregate's lock", func() (bool, error) {
		return lockWaiting(ctx, db, conn2)
	})
	select {
	case err := <-done:
		t.Fatalf("the second Enqueue of tx-1 returned (%v) while the first transaction was open", err)
	default:
	}
	if err := t1.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := t2.Commit(); err != nil {
		t.Fatal(err)
	}
	evs := claimAll(t, s)
	var order []outbox.EventID
	for _, e := range evs {
		if e.AggregateID == "tx-1" {
			order = append(order, e.EventID)
		}
	}
	if len(order) != 2 || order[0] != first[0] || order[1] != second[0] {
		t.Fatalf("tx-1 claimed as %v, want the first transaction's event, then the second's", order)
	}
}

// TestPlainInsertWaitsForEnqueue: a producer that writes the outbox table
// with plain SQL, and knows nothing of Enqueue, waits for an open Enqueue
// of its aggregate (the table's trigger takes the same row lock), so that
// it comes after it in id order and in aggregate_seq.
func TestPlainInsertWaitsForEnqueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{})
	t1, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer t1.Rollback()
	first, err := s.Enqueue(ctx, t1, payment("tx-1", 1))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var conn2 int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&conn2); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := conn.ExecContext(ctx, "INSERT INTO `"+s.Table()+"` (aggregate_type, aggregate_id, event_type, payload) VALUES ('payment', 'tx-1', 'E', '{}')")
		done <- err
	}()
	wait.Until(t, 30*time.Second, "the plain INSERT to wait for the aggregate's lock", func() (bool, error) {
		var n int
		err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.processlist
            WHERE id = ? AND info LIKE 'INSERT INTO %'`, conn2).Scan(&n)
		return n > 0, err
	})
	select {
	case err := <-done:
		t.Fatalf("the plain INSERT of tx-1 returned (%v) while the Enqueue's transaction was open", err)
	default:
	}
	if err := t1.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	evs := claimAll(t, s)
	if len(evs) != 2 || evs[0].EventID != first[0] || evs[0].AggregateSeq != 1 || evs[1].AggregateSeq != 2 || evs[0].ID > evs[1].ID {
		t.Fatalf("claimed %+v; want the Enqueue's event (seq 1), then the plain INSERT's (seq 2)", evs)
	}
}

// TestEnqueueDetails covers what the conformance suite does not: unicode
// and byte-exact payloads, absolute times, a large batch split in several
// INSERTs, and the in-process nudge.
func TestEnqueueDetails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{})
	nudged := 0
	defer s.OnEnqueue(func() { nudged++ })()
	payload := `{"name": "Zoë 😀 \u00e9", "n": 1.50, "list": [ 1 ,2 ]}`
	at := time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.FixedZone("KST", 9*3600))
	e := outbox.Event{AggregateType: "Payment", AggregateID: "TX-1 ✓", EventType: "E", Payload: []byte(payload), ExpiresAt: at,
		Headers: map[string]string{"traceparent": "00-1-2-01"}}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := s.Enqueue(ctx, tx, e)
	if err != nil {
		t.Fatal(err)
	}
	// 2500 events: more than one INSERT.
	var many []outbox.Event
	for i := 0; i < 2500; i++ {
		many = append(many, payment(fmt.Sprintf("bulk-%d", i%7), i))
	}
	if _, err := s.Enqueue(ctx, tx, many...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if nudged != 2 {
		t.Errorf("OnEnqueue observers ran %d times, want once per Enqueue", nudged)
	}
	r, err := s.GetEvent(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Payload) != payload || r.AggregateID != "TX-1 ✓" || r.AggregateType != "Payment" {
		t.Errorf("stored %q / %q / %q", r.Payload, r.AggregateType, r.AggregateID)
	}
	if !r.ExpiresAt.Equal(at.Truncate(time.Microsecond)) || r.ExpiresAt.Location() != time.UTC {
		t.Errorf("expires_at = %s, want %s in UTC to the microsecond", r.ExpiresAt, at.UTC())
	}
	// Aggregate ids compare byte for byte: tx-1 is not TX-1 ✓'s aggregate.
	if recs, err := s.ListEvents(ctx, store.ListFilter{AggregateID: "tx-1 ✓"}); err != nil || len(recs) != 0 {
		t.Errorf("a case-insensitive match found %d events (%v)", len(recs), err)
	}
	st, err := s.Stats(ctx, true)
	if err != nil || st.Counts[outbox.StatusPending] != 2501 {
		t.Fatalf("stats = %+v, %v", st.Counts, err)
	}
	if st.OldestPendingAge < 0 || st.OldestPendingAge > time.Minute {
		t.Errorf("oldest pending age %s", st.OldestPendingAge)
	}
}

// TestMigrateIdempotentSteps: MySQL commits each DDL statement by itself,
// so a migration cut short is finished by running it again. Forgetting the
// applied version (as if the run died before recording it) and migrating
// again must succeed on the existing tables and keep their rows.
func TestMigrateIdempotentSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{})
	tx, _ := db.BeginTx(ctx, nil)
	if _, err := s.Enqueue(ctx, tx, payment("m", 1)); err != nil {
		t.Fatal(err)
	}
	tx.Commit()
	_, latest, err := s.MigrationVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "DELETE FROM `"+s.Tables().Migrations+"` WHERE version_id > 0"); err != nil {
		t.Fatal(err)
	}
	applied, err := s.MigrateUp(ctx)
	if err != nil || int64(len(applied)) != latest {
		t.Fatalf("migrating again over existing tables = %v, %v", applied, err)
	}
	if n := countRows(t, db, s.Table()); n != 1 {
		t.Fatalf("%d rows after the repeated migration, want 1", n)
	}
	if n := countRows(t, db, s.Table()+"_aggregate_locks"); n != 65536 {
		t.Fatalf("lock table has %d rows, want 65536", n)
	}
	var create string
	var name string
	if err := db.QueryRowContext(ctx, "SHOW CREATE TABLE `"+s.Table()+"`").Scan(&name, &create); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.ToLower(create), "json_valid(`payload`)") || !strings.Contains(create, "datetime(6)") {
		t.Errorf("schema:\n%s", create)
	}
	// down, up, down: nothing is left but the version table.
	if err := s.MigrateDown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.MigrateDown(ctx); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE ?",
		s.Table()+"%").Scan(&left); err != nil || left != 1 {
		t.Fatalf("%d tables left after down (%v), want only the version table", left, err)
	}
	if _, err := s.MigrateUp(ctx); err != nil { // for the cleanup's down
		t.Fatal(err)
	}
}

func countRows(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM `" + table + "`").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStoreConformanceDriverDefaults runs the store half of the suite on a
// *sql.DB opened with sql.Open("mysql", dsn) and the driver's defaults
// (parseTime off, loc Local, REPEATABLE READ, no interpolation): the store
// must not depend on the recommended settings for correctness.
func TestStoreConformanceDriverDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := mysql.ParseConfig(testenv.MySQL.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	dsn := fmt.Sprintf("%s:%s@tcp(%s)/%s", cfg.User, cfg.Passwd, cfg.Addr, cfg.DBName)
	storetest.RunStore(t, func(t *testing.T) *storetest.Harness {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		s := newStore(t, db, mysql.Config{})
		return &storetest.Harness{
			Store: s,
			Begin: func(ctx context.Context) (storetest.Tx, error) {
				tx, err := db.BeginTx(ctx, nil)
				return myTx{tx, s}, err
			},
			Scale: scale(),
		}
	})
}

// TestDeepPayloadRefusedBeforeSQL: MariaDB's JSON_VALID refuses nesting 32
// levels deep; the store says so with a typed error instead of a CHECK
// failure.
func TestDeepPayloadRefusedBeforeSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{})
	ok := outbox.Event{AggregateType: "p", AggregateID: "a", EventType: "E",
		Payload: []byte(strings.Repeat("[", 31) + `"]]]\"{{"` + strings.Repeat("]", 31))}
	deep := ok
	deep.Payload = []byte(strings.Repeat(`{"a":`, 32) + "1" + strings.Repeat("}", 32))
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := s.Enqueue(ctx, tx, ok); err != nil {
		t.Fatalf("31 levels: %v", err)
	}
	_, err = s.Enqueue(ctx, tx, ok, deep)
	var ie *outbox.InvalidEventError
	if !errors.As(err, &ie) || ie.Index != 1 || ie.Field != "payload" || !strings.Contains(ie.Reason, "32 levels") {
		t.Fatalf("32 levels: %v, want an InvalidEventError for event #1's payload", err)
	}
}

// TestDeepCompensationRefusedBeforeSQL: the compensating event's payload
// is stored inside the on_expired JSON document, one level down, so it may
// nest 30 levels, and 31 get the typed error rather than a CHECK failure.
func TestDeepCompensationRefusedBeforeSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{})
	nested := func(levels int) []byte {
		return []byte(strings.Repeat(`{"a":`, levels) + "1" + strings.Repeat("}", levels))
	}
	withCompensation := func(levels int) outbox.Event {
		return outbox.Event{AggregateType: "p", AggregateID: "deep-compensation", EventType: "E", Payload: []byte(`{}`),
			ExpiresAt: time.Now().Add(time.Hour), OnExpired: &outbox.Compensation{EventType: "Cancelled", Payload: nested(levels)}}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := s.Enqueue(ctx, tx, withCompensation(30)); err != nil {
		t.Fatalf("a compensation payload 30 levels deep: %v", err)
	}
	_, err = s.Enqueue(ctx, tx, withCompensation(30), withCompensation(31))
	var ie *outbox.InvalidEventError
	if !errors.As(err, &ie) || ie.Index != 1 || ie.Field != "on_expired" || !strings.Contains(ie.Reason, "31 levels") || !strings.Contains(ie.Reason, "more than 30") {
		t.Fatalf("a compensation payload 31 levels deep: %v, want an InvalidEventError for event #1's on_expired", err)
	}
}

// TestEnqueueSplitsByBytes: one Enqueue of 1,000 events of 20 KB each
// (20 MB, over MariaDB's default max_allowed_packet of 16 MiB) is split
// into INSERTs of at most about 4 MiB, so it succeeds whatever the server's
// packet limit, down to MariaDB's default.
func TestEnqueueSplitsByBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{})
	payload := []byte(`{"blob":"` + strings.Repeat("x", 20_000) + `"}`)
	events := make([]outbox.Event, 1000)
	for i := range events {
		events[i] = outbox.Event{AggregateType: "p", AggregateID: fmt.Sprintf("bytes-%d", i%10), EventType: "E", Payload: payload}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := s.Enqueue(ctx, tx, events...); err != nil {
		t.Fatalf("Enqueue of 1,000 events of 20 KB: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(ctx, true)
	if err != nil || st.Counts[outbox.StatusPending] != 1000 {
		t.Fatalf("stats = %+v, %v; want 1000 PENDING", st.Counts, err)
	}
}
