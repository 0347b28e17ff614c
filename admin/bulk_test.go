package admin_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/admin"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/internal/testenv/pgtest"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/storetest"
)

// bulkOutbox is a PostgreSQL outbox of n FAILED events, each of an
// aggregate of its own, loaded in one INSERT ... SELECT. The store's
// connections carry application name app, so that pg_stat_activity tells
// them apart; pool (for the test's own statements) does not.
type bulkOutbox struct {
	store       store.Store
	pool        *pgxpool.Pool
	table, app  string
	first, last int64 // the rows' ids
}

func newBulkOutbox(t testing.TB, n int) *bulkOutbox {
	t.Helper()
	dsn := testenv.Postgres.Addr(t)
	ctx := context.Background()
	table := storetest.TableName("admbulk")
	o := &bulkOutbox{table: table, app: "outbox-test-" + table}
	var err error
	if o.pool, err = pgxpool.New(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.pool.Close)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = o.app
	storePool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(storePool.Close)
	if o.store, err = postgres.New(storePool, postgres.Config{Table: table, Logger: quiet()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := o.pool.Exec(context.Background(), pgtest.DropTables(table)); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if _, err := o.store.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := o.pool.Exec(ctx, `INSERT INTO "`+table+`" (event_id, aggregate_type, aggregate_id, event_type, payload,
            status, retry_count, created_at, available_at, last_error)
        SELECT gen_random_uuid(), 'payment', 'tx-' || i, 'ApprovalRequested', json_build_object('n', i),
               'FAILED', 5, now(), now(), 'http sink: POST http://gw.test/approve: status 503 Service Unavailable'
        FROM generate_series(1, $1::int) AS i`, n); err != nil {
		t.Fatalf("load: %v", err)
	}
	if _, err := o.pool.Exec(ctx, `ANALYZE "`+table+`"`); err != nil {
		t.Fatal(err)
	}
	if err := o.pool.QueryRow(ctx, `SELECT min(id), max(id) FROM "`+table+`"`).Scan(&o.first, &o.last); err != nil {
		t.Fatal(err)
	}
	return o
}

// checkAllRequeued fails unless each of the n events is PENDING with
// exactly one REQUEUED audit row naming the operator alice.
func (o *bulkOutbox) checkAllRequeued(t testing.TB, n int) {
	t.Helper()
	ctx := context.Background()
	var notPending, audits, audited int
	if err := o.pool.QueryRow(ctx, `SELECT count(*) FROM "`+o.table+`" WHERE status <> 'PENDING'`).Scan(&notPending); err != nil {
		t.Fatal(err)
	}
	if err := o.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT outbox_id) FROM "`+o.table+`_attempts"
        WHERE outcome = $1 AND relay_id = 'operator:alice'`, string(store.Requeued)).Scan(&audits, &audited); err != nil {
		t.Fatal(err)
	}
	if notPending != 0 || audits != n || audited != n {
		t.Fatalf("%d of %d events not PENDING; %d REQUEUED audit rows on %d events, want one on each of %d", notPending, n, audits, audited, n)
	}
}

// jobAnswer is the API's answer about a bulk job.
type jobAnswer struct {
	JobID  string `json:"job_id"`
	State  string `json:"state"`
	URL    string `json:"url"`
	Result struct {
		actionAnswer
		Error string `json:"error"`
	} `json:"result"`
}

// TestBulkRetryHoldsNoLongTransaction starts a bulk retry of 2,000 events
// in pages of 50 and, while it runs, locks and updates the last event's
// row without waiting (FOR UPDATE NOWAIT): a bulk action holding one
// transaction over the events, or a page of them, would hold that lock.
// While the test holds the row, the job goes on with the others. At the
// end every event is requeued with one audit row. Each event is one
// transaction (a commit each): on a loaded machine the job takes minutes.
func TestBulkRetryHoldsNoLongTransaction(t *testing.T) {
	const n = 2000
	o := newBulkOutbox(t, n)
	base := serve(t, admin.Config{Store: o.store, BulkPageSize: 50, BulkWait: -1})
	op := client{t, base, operatorToken}
	var j jobAnswer
	op.post("/api/v1/events/retry?status=FAILED&reason=gateway+back").want(t, http.StatusAccepted).decode(t, &j)
	if j.JobID == "" || j.URL != "/api/v1/jobs/"+j.JobID {
		t.Fatalf("202 without a job: %+v", j)
	}
	poll := func() jobAnswer {
		var cur jobAnswer
		op.get(j.URL).want(t, 200).decode(t, &cur)
		return cur
	}
	waitUntil(t, 2*time.Minute, "the job has changed an event", func() bool { return poll().Result.Applied > 0 })

	ctx := context.Background()
	tx, err := o.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var status string
	err = tx.QueryRow(ctx, `SELECT status FROM "`+o.table+`" WHERE id = $1 FOR UPDATE NOWAIT`, o.last).Scan(&status)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		t.Fatalf("the last event's row is locked while the bulk action runs: it holds a long transaction")
	}
	if err != nil {
		t.Fatal(err)
	}
	if status != string(outbox.StatusFailed) {
		t.Fatalf("the last event is %s: the job got to it before the check (raise n)", status)
	}
	if _, err := tx.Exec(ctx, `UPDATE "`+o.table+`" SET last_error = last_error || ' (seen)' WHERE id = $1`, o.last); err != nil {
		t.Fatal(err)
	}
	held := poll()
	if held.State != "running" {
		t.Fatalf("the job is %s before the test let go of the row: %+v", held.State, held)
	}
	waitUntil(t, 2*time.Minute, "the job goes on while the test holds a row", func() bool {
		return poll().Result.Applied > held.Result.Applied
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var done jobAnswer
	waitUntil(t, 10*time.Minute, "the job finishes", func() bool { done = poll(); return done.State != "running" })
	if done.State != "done" || done.Result.Applied != n || done.Result.Matched != n {
		t.Fatalf("job: %+v, want done with %d applied", done, n)
	}
	o.checkAllRequeued(t, n)
}

// TestBulkJobOnEveryBackend runs a bulk skip that answers 202 on each
// backend and follows the job to the end: every event skipped with its
// audit row, and the job answers 404 once unknown.
func TestBulkJobOnEveryBackend(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			b := be.open(t)
			base := serve(t, admin.Config{Store: b.store, BulkPageSize: 9, BulkWait: -1, FailedBlocks: true})
			const n = 60
			events := make([]outbox.Event, n)
			for i := range events {
				events[i] = payment("job-"+strconv.Itoa(i), 0)
			}
			b.enqueue(t, events...)
			failed := failHeads(t, b.store, "status 500 Internal Server Error")
			op := client{t, base, operatorToken}
			var j jobAnswer
			op.post("/api/v1/events/skip?status=FAILED").want(t, http.StatusAccepted).decode(t, &j)
			var done jobAnswer
			waitUntil(t, 2*time.Minute, "the job finishes", func() bool {
				client{t, base, viewerToken}.get(j.URL).want(t, 200).decode(t, &done)
				return done.State != "running"
			})
			if done.State != "done" || done.Result.Applied != n {
				t.Fatalf("job: %+v", done)
			}
			wantSkippedBy(t, b.store, "operator:alice", failed)
			op.get("/api/v1/jobs/"+fmt.Sprintf("%024x", 1)).want(t, http.StatusNotFound)
		})
	}
}

// TestDashboardBulkActionSaysWhenItRunsOn confirms "Retry all matching…"
// while the test holds the first event's row, so the job cannot finish:
// the page names the job, which then finishes once the row is let go.
func TestDashboardBulkActionSaysWhenItRunsOn(t *testing.T) {
	const n = 20
	o := newBulkOutbox(t, n)
	base := serve(t, admin.Config{Store: o.store, BulkPageSize: 5, BulkWait: 200 * time.Millisecond})
	ctx := context.Background()
	tx, err := o.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM "`+o.table+`" WHERE id = $1 FOR UPDATE`, o.first); err != nil {
		t.Fatal(err)
	}
	c := browserless(t)
	fetch(t, c, "POST", base+"/login", url.Values{"token": {operatorToken}})
	_, body := fetch(t, c, "GET", base+"/events?status=FAILED", nil)
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token in the events page")
	}
	resp, body := fetch(t, c, "POST", base+"/events/bulk/retry?status=FAILED", url.Values{"csrf_token": {m[1]}, "confirm": {"yes"}})
	job := regexp.MustCompile(`Still running in the background as job ([0-9a-f]+)`).FindStringSubmatch(body)
	if resp.StatusCode != 200 || job == nil {
		t.Fatalf("confirmed bulk retry while a row is held: %d, want a page naming the job:\n%s", resp.StatusCode, body)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var done jobAnswer
	waitUntil(t, time.Minute, "the job finishes", func() bool {
		client{t, base, viewerToken}.get("/api/v1/jobs/"+job[1]).want(t, 200).decode(t, &done)
		return done.State != "running"
	})
	if done.State != "done" || done.Result.Applied != n {
		t.Fatalf("job: %+v", done)
	}
	o.checkAllRequeued(t, n)
}

// TestCloseStopsABulkJobKeepingItsChanges closes the handler while a job
// waits on a row the test holds: Close returns, the job is "stopped" with
// the events before that row requeued and audited, and nothing after it
// changed.
func TestCloseStopsABulkJobKeepingItsChanges(t *testing.T) {
	const n = 30
	o := newBulkOutbox(t, n)
	h, err := admin.New(admin.Config{Store: o.store, Tokens: testTokens, Logger: quiet(), BulkPageSize: 4, BulkWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx := context.Background()
	tx, err := o.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var held int64 // the 11th event's row (ids have gaps)
	if err := tx.QueryRow(ctx, `SELECT id FROM "`+o.table+`" ORDER BY id OFFSET 10 LIMIT 1`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM "`+o.table+`" WHERE id = $1 FOR UPDATE`, held); err != nil {
		t.Fatal(err)
	}
	op := client{t, srv.URL, operatorToken}
	var j jobAnswer
	op.post("/api/v1/events/retry?status=FAILED").want(t, http.StatusAccepted).decode(t, &j)
	waitUntil(t, time.Minute, "the job reaches the held row", func() bool {
		var cur jobAnswer
		op.get(j.URL).want(t, 200).decode(t, &cur)
		return cur.Result.Applied == 10
	})
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	var after jobAnswer
	op.get(j.URL).want(t, 200).decode(t, &after)
	if after.State != "stopped" || after.Result.Applied != 10 || !strings.Contains(after.Result.Error, "run it again") {
		t.Fatalf("job after Close: %+v, want stopped after 10 applied, saying to run it again", after)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var pending, audits int
	if err := o.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'PENDING' AND id < $1),
            (SELECT count(*) FROM "`+o.table+`_attempts" WHERE outcome = 'REQUEUED')
        FROM "`+o.table+`"`, held).Scan(&pending, &audits); err != nil {
		t.Fatal(err)
	}
	var failed int
	if err := o.pool.QueryRow(ctx, `SELECT count(*) FROM "`+o.table+`" WHERE status = 'FAILED' AND id >= $1`, held).Scan(&failed); err != nil {
		t.Fatal(err)
	}
	if pending != 10 || audits != 10 || failed != n-10 {
		t.Fatalf("after the stop: %d requeued before the held row and %d audit rows (want 10 each), %d FAILED from it on (want %d)", pending, audits, failed, n-10)
	}
}
