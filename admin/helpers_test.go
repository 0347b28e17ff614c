package admin_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/admin"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/internal/testenv/pgtest"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/mysql"
	"github.com/txoutbox/outbox/store/sqlite"
	"github.com/txoutbox/outbox/store/storetest"
)

// Tokens of the tests: long enough, and distinctive so that a test can
// look for them in every answer.
const (
	viewerToken   = "viewer-secret-token-0123456789"
	operatorToken = "operator-secret-token-0123456789"
	operator2     = "operator2-secret-token-012345678"
)

var testTokens = []admin.Token{
	{Role: admin.Viewer, Name: "victor", Token: viewerToken},
	{Role: admin.Operator, Name: "alice", Token: operatorToken},
	{Role: admin.Operator, Name: "bob", Token: operator2},
}

// backend is one migrated outbox on a table of its own.
type backend struct {
	name    string
	store   store.Store
	enqueue func(t testing.TB, events ...outbox.Event) []outbox.EventID
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newPostgres(t testing.TB) *backend {
	pool, s := pgtest.Outbox(t, "adm")
	return &backend{name: "postgres", store: s, enqueue: func(t testing.TB, events ...outbox.Event) []outbox.EventID {
		t.Helper()
		ctx := context.Background()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		ids, err := s.Enqueue(ctx, tx, events...)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return ids
	}}
}

func sqlEnqueue(db *sql.DB, enq func(ctx context.Context, tx *sql.Tx, events ...outbox.Event) ([]outbox.EventID, error)) func(t testing.TB, events ...outbox.Event) []outbox.EventID {
	return func(t testing.TB, events ...outbox.Event) []outbox.EventID {
		t.Helper()
		ctx := context.Background()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		ids, err := enq(ctx, tx, events...)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		return ids
	}
}

func newSQLite(t testing.TB) *backend {
	path := filepath.Join(t.TempDir(), "outbox.db")
	s, err := sqlite.Open(context.Background(), "sqlite://"+path, sqlite.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.MigrateUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &backend{name: "sqlite", store: s, enqueue: sqlEnqueue(s.DB(), s.Enqueue)}
}

func newMySQL(t testing.TB) *backend {
	c, err := mysql.NewConnector(testenv.MySQL.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { db.Close() })
	table := storetest.TableName("adm")
	s, err := mysql.New(db, mysql.Config{Table: table, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := storetest.DropMySQLTables(context.Background(), db, table); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if _, err := s.MigrateUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &backend{name: "mysql", store: s, enqueue: sqlEnqueue(db, s.Enqueue)}
}

var backends = []struct {
	name string
	open func(testing.TB) *backend
}{{"postgres", newPostgres}, {"sqlite", newSQLite}, {"mysql", newMySQL}}

func payment(aggregateID string, n int) outbox.Event {
	return outbox.Event{AggregateType: "payment", AggregateID: aggregateID, EventType: "ApprovalRequested",
		Payload: []byte(fmt.Sprintf(`{"card":"4111-secret-pan","aggregate":%q,"n":%d}`, aggregateID, n)),
		Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
}

// failHeads claims every claimable event and completes each with a
// FAILED outcome whose error is errText (with the event id in it, as the
// HTTP sink writes it), so that the events behind them become BLOCKED.
// testTraceID is the trace id failHeads records on the failed attempts.
const testTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"

// testReceipt is the receipt failHeads records on the failed attempts.
const testReceipt = `{"kind":"http","destination":"http://gw.test/approve","answered_at":"2026-12-07T23:00:00Z","http":{"status":503,"body_sha256":"00","body_bytes":0,"headers_sha256":"00"}}`

func failHeads(t testing.TB, st store.Store, errText string) []outbox.EventID {
	t.Helper()
	ctx := context.Background()
	c, err := st.Claim(ctx, store.ClaimRequest{RelayID: "test-relay", Limit: 1000, Lease: time.Minute, FailedBlocks: true})
	if err != nil {
		t.Fatal(err)
	}
	req := store.CompleteRequest{Token: c.Token, RelayID: "test-relay", FailedBlocks: true}
	var failed []outbox.EventID
	seen := map[string]bool{}
	for _, e := range c.Events {
		key := e.AggregateType + "/" + e.AggregateID
		o := store.Outcome{ID: e.ID, EventID: e.EventID, Attempt: e.RetryCount + 1, StartedAt: c.DBTime, FinishedAt: c.DBTime}
		if seen[key] {
			o.Kind, o.Block = store.Released, true
		} else {
			seen[key] = true
			o.Kind, o.Attempted = store.Failed, true
			o.Error = fmt.Sprintf("http sink: event %s: POST http://gw.test/approve: %s", e.EventID, errText)
			o.TraceID = testTraceID
			o.Receipt = []byte(testReceipt)
			failed = append(failed, e.EventID)
		}
		req.Outcomes = append(req.Outcomes, o)
	}
	if _, err := st.Complete(ctx, req); err != nil {
		t.Fatal(err)
	}
	return failed
}

// client calls the handler as one token holder.
type client struct {
	t     testing.TB
	base  string
	token string
}

type answer struct {
	status int
	body   []byte
}

func (a answer) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("decode %s: %v", a.body, err)
	}
}

func (c client) do(method, path string) answer {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, secret := range []string{viewerToken, operatorToken, operator2} {
		if bytes.Contains(body, []byte(secret)) {
			c.t.Fatalf("%s %s: the answer contains a token: %s", method, path, body)
		}
	}
	return answer{resp.StatusCode, body}
}

func (c client) get(path string) answer  { c.t.Helper(); return c.do("GET", path) }
func (c client) post(path string) answer { c.t.Helper(); return c.do("POST", path) }

// want fails unless a has status.
func (a answer) want(t testing.TB, status int) answer {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d, want %d: %s", a.status, status, a.body)
	}
	return a
}

func serve(t testing.TB, cfg admin.Config) string {
	t.Helper()
	if cfg.Tokens == nil && !cfg.InsecureNoAuth {
		cfg.Tokens = testTokens
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	if cfg.BulkWait == 0 {
		// A bulk action answers with its result, not with a job, however
		// slow a loaded machine makes it (tests of jobs set -1).
		cfg.BulkWait = 2 * time.Minute
	}
	h, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		if err := h.Close(); err != nil {
			t.Errorf("close the handler: %v", err)
		}
	})
	return srv.URL
}

func statusOf(t testing.TB, st store.Store, id outbox.EventID) outbox.Status {
	t.Helper()
	r, err := st.GetEvent(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r.Status
}

// wantSkippedBy fails unless each of ids is SKIPPED with, as its last
// attempt, a Skipped audit row by relayID (the operator).
func wantSkippedBy(t testing.TB, st store.Store, relayID string, ids []outbox.EventID) {
	t.Helper()
	for _, id := range ids {
		if s := statusOf(t, st, id); s != outbox.StatusSkipped {
			t.Fatalf("event %s is %s", id, s)
		}
		atts, err := st.Attempts(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if last := atts[len(atts)-1]; last.Outcome != store.Skipped || last.RelayID != relayID {
			t.Fatalf("audit row of %s: %+v", id, last)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// waitUntil polls cond every 10ms until it holds or the timeout passes.
func waitUntil(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, what)
		}
		<-tick.C
	}
}
