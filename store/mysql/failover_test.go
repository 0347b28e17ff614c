package mysql_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink/httpsink"
	"github.com/txoutbox/outbox/store/mysql"
	"github.com/txoutbox/outbox/store/storetest"
)

func errNumber(err error) uint16 {
	var me *mysqldrv.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// TestPoolDiscardsReadOnlySession: a pooled connection whose write fails
// because its session is read-only (error 1792, as every write on a
// server with read_only fails with 1290 or 1836) is closed, not handed to
// the next caller; a connection whose write is refused for its values
// (1406 data too long) is kept.
func TestPoolDiscardsReadOnlySession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := mysql.NewConnector(testenv.MySQL.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	db.SetMaxOpenConns(1)
	table := storetest.TableName("myfo")
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+table+" (v VARCHAR(1))"); err != nil {
		t.Fatal(err)
	}
	defer db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+table)
	connID := func() int64 {
		t.Helper()
		var id int64
		if err := db.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	first := connID()
	if _, err := db.ExecContext(ctx, "SET SESSION TRANSACTION READ ONLY"); err != nil {
		t.Fatal(err)
	}
	_, err = db.ExecContext(ctx, "INSERT INTO "+table+" VALUES ('a')")
	if errNumber(err) != 1792 {
		t.Fatalf("a write on a read-only session: %v, want error 1792", err)
	}
	second := connID()
	if second == first {
		t.Fatalf("after a read-only failure the pool handed out the same session %d", first)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO "+table+" VALUES ('a')"); err != nil {
		t.Fatalf("a write on the new session: %v", err)
	}
	// A statement's own error does not cost the session.
	_, err = db.ExecContext(ctx, "INSERT INTO "+table+" VALUES ('too long')")
	if errNumber(err) != 1406 {
		t.Fatalf("a value too long: %v, want error 1406", err)
	}
	if third := connID(); third != second {
		t.Errorf("a value too long closed the session (%d, then %d)", second, third)
	}
	// In a transaction too: the commit path keeps the mark.
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES ('b')")
	tx.Rollback()
	if errNumber(err) != 1792 {
		t.Fatalf("a write in a read-only transaction: %v, want error 1792", err)
	}
	if fourth := connID(); fourth == second {
		t.Errorf("after a read-only failure in a transaction the pool handed out the same session %d", second)
	}
}

// readOnlyConnector opens connections whose sessions are read-only while
// readOnly is set (SET SESSION TRANSACTION READ ONLY: every write fails
// with 1792, as on a former primary after a failover), and remembers the
// ids of the sessions it opened.
type readOnlyConnector struct {
	driver.Connector
	readOnly atomic.Bool
	mu       sync.Mutex
	ids      []int64
}

func (c *readOnlyConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	q := conn.(driver.QueryerContext)
	rows, err := q.QueryContext(ctx, "SELECT CONNECTION_ID()", nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	dest := make([]driver.Value, 1)
	err = rows.Next(dest)
	rows.Close()
	if err != nil {
		conn.Close()
		return nil, err
	}
	c.mu.Lock()
	c.ids = append(c.ids, dest[0].(int64))
	c.mu.Unlock()
	if c.readOnly.Load() {
		if _, err := conn.(driver.ExecerContext).ExecContext(ctx, "SET SESSION TRANSACTION READ ONLY", nil); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return conn, nil
}

// TestFailoverReadOnlySessionsMidDrain: in the middle of a drain of 500
// events, every session of the relay's pool is ended (KILL, as a failover
// does) and every new one is read-only for 20 seconds (error 1792 on each
// write, as on a former primary), then writable. A pool that kept its
// read-only sessions would fail every write for good; this one discards
// them, the relay retries, and drains without intervention: nothing ends
// FAILED or BLOCKED, nothing is lost.
func TestFailoverReadOnlySessionsMidDrain(t *testing.T) {
	t.Parallel()
	const events = 500
	ctx := context.Background()
	base, err := mysql.NewConnector(testenv.MySQL.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	rc := &readOnlyConnector{Connector: base}
	db := sql.OpenDB(rc)
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	t.Cleanup(func() { db.Close() })
	admin := openDB(t)
	var logs testenv.Buffer
	s := newStore(t, admin, mysql.Config{Table: storetest.TableName("myfo")})
	rs, err := mysql.New(db, mysql.Config{Table: s.Table(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	evs := make([]outbox.Event, events)
	for i := range evs {
		evs[i] = storetest.PaymentEvent(fmt.Sprintf("payment-%d", i%50), i)
	}
	tx, err := admin.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := s.Enqueue(ctx, tx, evs...)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	received := map[string]int{}
	var requests atomic.Int64
	failover := make(chan struct{})
	var readOnlyAt time.Time
	// The failover happens inside the handler of request 150, in the
	// middle of the second batch of 100: that batch is claimed, so its
	// outcomes are written on the sessions that turned read-only. At the
	// end of the first batch, a loaded machine could record the first
	// two batches before the test's goroutine made the switch, and then
	// only claims failed: no outcome was written while read-only.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 150 {
			rc.readOnly.Store(true)
			rc.mu.Lock()
			old := rc.ids
			rc.mu.Unlock()
			for _, id := range old {
				_, _ = admin.ExecContext(ctx, fmt.Sprintf("KILL %d", id)) // ended already: fine
			}
			readOnlyAt = time.Now()
			close(failover)
		}
		mu.Lock()
		received[r.Header.Get("Outbox-Event-Id")]++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	sk, err := httpsink.New(httpsink.Config{URL: srv.URL + "/approve", Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(relay.Config{
		Store: rs, Sink: sk, RelayID: "failover-relay",
		BatchSize: 100, Lease: 20 * time.Second, SweepInterval: time.Second,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- r.Drain(dctx) }()
	select {
	case <-failover:
	case err := <-drained:
		t.Fatalf("the drain ended (%v) before the failover", err)
	}
	outage := time.NewTimer(20 * time.Second)
	var writableAt time.Time
	select {
	case <-outage.C:
		rc.readOnly.Store(false)
		writableAt = time.Now()
	case err := <-drained:
		t.Fatalf("the drain ended (%v) while every session was read-only; the log:\n%s", err, logs.String())
	}
	if err := <-drained; err != nil {
		t.Fatalf("drain: %v; the log:\n%s", err, logs.String())
	}
	rc.mu.Lock()
	sessions := len(rc.ids)
	rc.mu.Unlock()
	t.Logf("read-only for %s; drained %s after the sessions turned writable; %d sessions opened; %d requests for %d events; %d complete errors",
		writableAt.Sub(readOnlyAt).Round(time.Millisecond), time.Since(writableAt).Round(time.Millisecond),
		sessions, requests.Load(), events, r.Stats().CompleteErrors)
	if r.Stats().CompleteErrors == 0 {
		t.Error("no write of an outcome failed: the sessions never turned read-only under the relay")
	}
	for _, status := range []outbox.Status{outbox.StatusFailed, outbox.StatusBlocked} {
		if n := storetest.CountStatus(t, s, status); n != 0 {
			t.Errorf("%d events %s", n, status)
		}
	}
	if n := storetest.CountStatus(t, s, outbox.StatusProcessed); n != events {
		t.Errorf("%d events PROCESSED, want %d", n, events)
	}
	mu.Lock()
	for _, id := range ids {
		if received[id.String()] == 0 {
			t.Errorf("event %s was never received", id)
		}
	}
	mu.Unlock()
	if st := r.Stats(); st.Failed != 0 || st.OutcomesRefused != 0 {
		t.Errorf("relay stats %+v: a database failure ended events FAILED", st)
	}
	if lines := logs.Lines("smaller groups"); len(lines) > 0 {
		t.Errorf("the relay took a read-only database for a refusal of the data:\n%s", strings.Join(lines, "\n"))
	}
	if t.Failed() {
		t.Logf("the log:\n%s", logs.String())
	}
}
