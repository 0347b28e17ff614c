package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink/httpsink"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/storetest"
)

// failoverEvents is how many events the failover tests drain.
const failoverEvents = 500

// failoverRig is a private cluster with a migrated outbox of
// failoverEvents events over 50 aggregates, an HTTP destination that
// answers 200 and counts what it receives, and a session of the test's own
// that stays writable whatever the server's default.
type failoverRig struct {
	cluster *testenv.PostgresCluster
	store   *postgres.Store
	admin   *pgx.Conn
	ids     []outbox.EventID
	logs    testenv.Buffer // the store's and the relay's

	mu       sync.Mutex
	received map[string]int // event id -> requests
	requests atomic.Int64
	onReq    func(n int64) // called with each request's number, in the handler
	server   *httptest.Server
}

func newFailoverRig(t *testing.T) *failoverRig {
	ctx := context.Background()
	rig := &failoverRig{cluster: testenv.StartPostgresCluster(t), received: map[string]int{}}
	admin, err := pgx.Connect(ctx, rig.cluster.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	// A session setting wins over the server's default: the test's own
	// session writes while the relay's cannot.
	if _, err := admin.Exec(ctx, "SET default_transaction_read_only = off"); err != nil {
		t.Fatal(err)
	}
	rig.admin = admin
	s, err := postgres.Open(ctx, rig.cluster.DSN()+"&application_name=failover-relay", postgres.Config{Table: "failover_events",
		Logger: slog.New(slog.NewTextHandler(&rig.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	rig.store = s
	events := make([]outbox.Event, failoverEvents)
	for i := range events {
		events[i] = storetest.PaymentEvent(fmt.Sprintf("payment-%d", i%50), i)
	}
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rig.ids, err = s.Enqueue(ctx, tx, events...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rig.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := rig.requests.Add(1)
		rig.mu.Lock()
		rig.received[r.Header.Get("Outbox-Event-Id")]++
		rig.mu.Unlock()
		if rig.onReq != nil {
			rig.onReq(n)
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(rig.server.Close)
	return rig
}

// relay returns a relay on st (the rig's store, or one around it) whose
// log is kept in rig.logs.
func (rig *failoverRig) relay(t *testing.T, st store.Store) *relay.Relay {
	sk, err := httpsink.New(httpsink.Config{URL: rig.server.URL + "/approve", Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(relay.Config{
		Store: st, Sink: sk, RelayID: "failover-relay",
		BatchSize: 100, Lease: 20 * time.Second, SweepInterval: time.Second,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&rig.logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// setReadOnly turns the server's default_transaction_read_only on or off
// and reloads the configuration, as a failover does to the former primary.
func (rig *failoverRig) setReadOnly(ctx context.Context, on bool) error {
	stmt := "ALTER SYSTEM RESET default_transaction_read_only"
	if on {
		stmt = "ALTER SYSTEM SET default_transaction_read_only = on"
	}
	if _, err := rig.admin.Exec(ctx, stmt); err != nil {
		return err
	}
	_, err := rig.admin.Exec(ctx, "SELECT pg_reload_conf()")
	return err
}

// check fails unless every event is PROCESSED and was received at least
// once, and none is FAILED or BLOCKED.
func (rig *failoverRig) check(t *testing.T, r *relay.Relay) {
	t.Helper()
	counts := map[string]int64{}
	rows, err := rig.admin.Query(context.Background(), "SELECT status, count(*) FROM failover_events GROUP BY status")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var status string
		var n int64
		if err := rows.Scan(&status, &n); err != nil {
			t.Fatal(err)
		}
		counts[status] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, status := range []outbox.Status{outbox.StatusFailed, outbox.StatusBlocked} {
		if n := storetest.CountStatus(t, rig.store, status); n != 0 {
			t.Errorf("%d events %s", n, status)
		}
	}
	if n := storetest.CountStatus(t, rig.store, outbox.StatusProcessed); n != failoverEvents {
		t.Errorf("%d events PROCESSED, want %d (rows by status: %v)", n, failoverEvents, counts)
	}
	rig.mu.Lock()
	defer rig.mu.Unlock()
	for _, id := range rig.ids {
		if rig.received[id.String()] == 0 {
			t.Errorf("event %s was never received", id)
		}
	}
	if st := r.Stats(); st.Failed != 0 || st.OutcomesRefused != 0 {
		t.Errorf("relay stats %+v: a database failure ended events FAILED", st)
	}
	if t.Failed() {
		t.Logf("the log:\n%s", rig.logs.String())
	}
}

// readsWatcher is the store with a hook on the relay's reads of one event
// (GetEvent).
type readsWatcher struct {
	*postgres.Store
	onRead func()
}

func (s readsWatcher) GetEvent(ctx context.Context, id outbox.EventID) (store.Record, error) {
	s.onRead()
	return s.Store.GetEvent(ctx, id)
}

// TestFailoverReadOnlyMidDrain: the database turns read-only in the middle
// of a drain (default_transaction_read_only, as a former primary after a
// failover) and writable again 20 seconds later, or sooner, at the third
// read of one event the relay makes meanwhile: a relay that took the
// failing writes for a refusal of the events' data read an event to see
// whether the database still answered, then once per event while it
// recorded its batch one event at a time, and stored FAILED for events the
// destination had accepted when the database came back then. The relay
// recovers by itself, drains, ends nothing FAILED or BLOCKED, and loses
// nothing.
func TestFailoverReadOnlyMidDrain(t *testing.T) {
	t.Parallel()
	rig := newFailoverRig(t)
	ctx := context.Background()
	var readOnlyAt atomic.Int64 // unix nanos; 0 while writable
	readOnly := make(chan struct{})
	// In the middle of the second batch of 100: that batch is claimed, so
	// its outcomes are written after the switch. At the end of the first,
	// a slow machine could claim the second after the switch, see the
	// claim fail, and back off past the outage with no outcome written.
	rig.onReq = func(n int64) {
		if n == 150 {
			if err := rig.setReadOnly(ctx, true); err != nil {
				t.Errorf("turn read-only: %v", err)
			}
			readOnlyAt.Store(time.Now().UnixNano())
			close(readOnly)
		}
	}
	var mu sync.Mutex
	var writableAt time.Time
	turnWritable := func(why string) {
		mu.Lock()
		defer mu.Unlock()
		if !writableAt.IsZero() {
			return
		}
		if err := rig.setReadOnly(ctx, false); err != nil {
			t.Errorf("turn writable: %v", err)
		}
		writableAt = time.Now()
		t.Logf("the database turns writable %s after it turned read-only: %s",
			writableAt.Sub(time.Unix(0, readOnlyAt.Load())).Round(time.Millisecond), why)
	}
	var reads atomic.Int64
	r := rig.relay(t, readsWatcher{rig.store, func() {
		if readOnlyAt.Load() != 0 && reads.Add(1) == 3 {
			turnWritable("the relay read an event a third time")
		}
	}})
	dctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- r.Drain(dctx) }()

	select {
	case <-readOnly:
	case err := <-drained:
		t.Fatalf("the drain ended (%v) before the database turned read-only", err)
	}
	outage := time.NewTimer(20 * time.Second) // how long the database stays read-only at most
	select {
	case <-outage.C:
		turnWritable("20 seconds passed")
	case err := <-drained:
		drained <- err
	}
	outage.Stop()
	if err := <-drained; err != nil {
		t.Fatalf("drain: %v; the log:\n%s", err, rig.logs.String())
	}
	mu.Lock()
	t.Logf("drained %s after the database turned writable; %d requests for %d events; %d complete errors",
		time.Since(writableAt).Round(time.Millisecond), rig.requests.Load(), failoverEvents, r.Stats().CompleteErrors)
	mu.Unlock()
	if r.Stats().CompleteErrors == 0 {
		t.Fatal("no write of an outcome failed: the database never turned read-only under the relay")
	}
	if lines := rig.logs.Lines("smaller groups"); len(lines) > 0 {
		t.Errorf("the relay took a read-only database for a refusal of the data:\n%s", strings.Join(lines, "\n"))
	}
	rig.check(t, r)
}

// TestFailoverReadOnlySessionsMidDrain: in the middle of a drain, the
// relay's sessions are ended and every new session is read-only for 20
// seconds (ALTER DATABASE ... SET default_transaction_read_only, applied
// when a session starts, as a former primary that came back as a standby
// answers), then new sessions are writable again. Sessions opened in
// those 20 seconds stay read-only for their whole life: a pool that kept
// them would fail every write until they were killed or expired. This
// one closes them at their first failed write, and the relay drains
// without intervention: nothing ends FAILED or BLOCKED, nothing is lost.
func TestFailoverReadOnlySessionsMidDrain(t *testing.T) {
	t.Parallel()
	rig := newFailoverRig(t)
	ctx := context.Background()
	var dbName string
	if err := rig.admin.QueryRow(ctx, "SELECT current_database()").Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	alter := "ALTER DATABASE " + pgx.Identifier{dbName}.Sanitize()
	// The failover happens inside the handler of one request, so the
	// destination has not answered it yet: the outcome of its batch is
	// written on a session opened after the failover.
	failover := make(chan struct{})
	var readOnlyAt time.Time
	rig.onReq = func(n int64) {
		if n != failoverEvents/5 {
			return
		}
		defer close(failover)
		if _, err := rig.admin.Exec(ctx, alter+" SET default_transaction_read_only = on"); err != nil {
			t.Errorf("turn new sessions read-only: %v", err)
			return
		}
		if _, err := rig.admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE application_name = 'failover-relay' AND pid <> pg_backend_pid()`); err != nil {
			t.Errorf("end the relay's sessions: %v", err)
		}
		readOnlyAt = time.Now()
	}
	r := rig.relay(t, rig.store)
	dctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- r.Drain(dctx) }()
	select {
	case <-failover:
	case err := <-drained:
		t.Fatalf("the drain ended (%v) before the failover", err)
	}
	if t.Failed() {
		t.FailNow()
	}
	outage := time.NewTimer(20 * time.Second)
	select {
	case <-outage.C:
	case err := <-drained:
		t.Fatalf("the drain ended (%v) while every new session was read-only; the log:\n%s", err, rig.logs.String())
	}
	if _, err := rig.admin.Exec(ctx, alter+" RESET default_transaction_read_only"); err != nil {
		t.Fatal(err)
	}
	writableAt := time.Now()
	if err := <-drained; err != nil {
		t.Fatalf("drain: %v; the log:\n%s", err, rig.logs.String())
	}
	t.Logf("new sessions read-only for %s; drained %s after they turned writable; %d requests for %d events; %d complete errors",
		writableAt.Sub(readOnlyAt).Round(time.Millisecond), time.Since(writableAt).Round(time.Millisecond),
		rig.requests.Load(), failoverEvents, r.Stats().CompleteErrors)
	if r.Stats().CompleteErrors == 0 {
		t.Fatal("no write of an outcome failed: the sessions never turned read-only under the relay")
	}
	if lines := rig.logs.Lines("smaller groups"); len(lines) > 0 {
		t.Errorf("the relay took a read-only database for a refusal of the data:\n%s", strings.Join(lines, "\n"))
	}
	rig.check(t, r)
}

// TestFailoverKilledConnections: the relay's sessions are ended by the
// server (pg_terminate_backend, SQLSTATE 57P01 admin_shutdown, as a
// failover or a restart does) again and again for 10 seconds in the
// middle of a drain. The pool reconnects; nothing ends FAILED or BLOCKED,
// and nothing is lost.
func TestFailoverKilledConnections(t *testing.T) {
	t.Parallel()
	rig := newFailoverRig(t)
	ctx := context.Background()
	start := make(chan struct{})
	var startOnce sync.Once
	rig.onReq = func(n int64) {
		if n == failoverEvents/5 {
			startOnce.Do(func() { close(start) })
		}
	}
	r := rig.relay(t, rig.store)
	dctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- r.Drain(dctx) }()
	<-start
	var killed int64
	end := time.Now().Add(10 * time.Second)
	for time.Now().Before(end) {
		var n int64
		err := rig.admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = 'failover-relay' AND pid <> pg_backend_pid()`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		killed += n
		// Let the relay reconnect and get a statement or two through.
		wait.For(t, time.Minute, "the relay to reconnect", func() bool {
			var live int64
			err := rig.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'failover-relay'`).Scan(&live)
			return err == nil && (live > 0 || !time.Now().Before(end))
		})
	}
	if err := <-drained; err != nil {
		t.Fatalf("drain: %v; the log:\n%s", err, rig.logs.String())
	}
	t.Logf("%d relay sessions killed; %d requests for %d events; %d complete errors",
		killed, rig.requests.Load(), failoverEvents, r.Stats().CompleteErrors)
	if killed == 0 {
		t.Fatal("no relay session was killed: the test tested nothing")
	}
	rig.check(t, r)
}

// TestPoolDiscardsReadOnlySession: a pooled session whose write fails
// because it is read-only (SQLSTATE 25006) is closed, not handed to the
// next caller; a pool configured by ConfigurePool reconnects. A session
// setting makes this one session read-only, as every session of a former
// primary stays after a failover.
func TestPoolDiscardsReadOnlySession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(testenv.Postgres.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	postgres.ConfigurePool(pc)
	postgres.ConfigurePool(pc) // twice changes nothing more
	pc.MaxConns = 1
	if pc.MaxConnLifetime != postgres.DefaultMaxConnLifetime {
		t.Errorf("MaxConnLifetime %s, want %s", pc.MaxConnLifetime, postgres.DefaultMaxConnLifetime)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var pid int
	if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "SET default_transaction_read_only = on"); err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, "CREATE TEMP TABLE read_only_probe (id int)")
	if err == nil || !strings.Contains(err.Error(), "25006") {
		t.Fatalf("a write on a read-only session: %v, want SQLSTATE 25006", err)
	}
	var pid2 int
	var ro string
	if err := pool.QueryRow(ctx, "SELECT pg_backend_pid(), current_setting('default_transaction_read_only')").Scan(&pid2, &ro); err != nil {
		t.Fatal(err)
	}
	if pid2 == pid || ro != "off" {
		t.Fatalf("after a read-only failure the pool handed out session %d (the failed one was %d), default_transaction_read_only=%s; want a new, writable session", pid2, pid, ro)
	}
	// A statement's own error does not cost the session.
	if _, err := pool.Exec(ctx, "SELECT 1/0"); err == nil {
		t.Fatal("1/0 did not fail")
	}
	var pid3 int
	if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid3); err != nil {
		t.Fatal(err)
	}
	if pid3 != pid2 {
		t.Errorf("a division by zero closed the session (%d, then %d)", pid2, pid3)
	}
}
