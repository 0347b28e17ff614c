package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/admin"
	"github.com/txoutbox/outbox/store"
)

type listAnswer struct {
	Events []struct {
		EventID     string `json:"event_id"`
		Status      string `json:"status"`
		AggregateID string `json:"aggregate_id"`
		EventType   string `json:"event_type"`
		Route       string `json:"route"`
		LastError   string `json:"last_error"`
	} `json:"events"`
	Next  string `json:"next"`
	Limit int    `json:"limit"`
}

type actionAnswer struct {
	Matched         int64            `json:"matched"`
	Applied         int64            `json:"applied"`
	Conflicts       int64            `json:"conflicts"`
	DryRun          bool             `json:"dry_run"`
	Actor           string           `json:"actor"`
	BlockedReleased int64            `json:"blocked_released"`
	PastDeadline    int64            `json:"past_deadline"`
	ByStatus        map[string]int64 `json:"by_status"`
	Summary         string           `json:"summary"`
}

func TestAPI(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			testAPI(t, b.open(t))
		})
	}
}

func testAPI(t *testing.T, b *backend) {
	ctx := context.Background()
	st := b.store
	base := serve(t, admin.Config{Store: st, FailedBlocks: true})
	viewer := client{t, base, viewerToken}
	op := client{t, base, operatorToken}
	op2 := client{t, base, operator2}

	// Three aggregates each with a FAILED head, two BLOCKED events behind
	// the first, one expired.
	heads := b.enqueue(t, payment("p-1", 1), payment("p-2", 1), payment("p-3", 1))
	if got := failHeads(t, st, "status 503 Service Unavailable"); len(got) != 3 {
		t.Fatalf("failed %d heads, want 3", len(got))
	}
	behind := b.enqueue(t, payment("p-1", 2), outbox.Event{AggregateType: "payment", AggregateID: "p-1", EventType: "Captured",
		Payload: []byte(`{}`), TTL: 1500 * time.Millisecond})
	later := b.enqueue(t, outbox.Event{AggregateType: "merchant", AggregateID: "m-1", EventType: "Onboarded", Payload: []byte(`{"m":1}`)})
	if _, err := st.Sweep(ctx, store.SweepRequest{RelayID: "test", FailedBlocks: true}); err != nil {
		t.Fatal(err)
	}
	for _, id := range behind {
		if s := statusOf(t, st, id); s != outbox.StatusBlocked {
			t.Fatalf("event behind the FAILED head is %s, want BLOCKED", s)
		}
	}
	// Let the deadline of the second one pass (no sweep runs meanwhile, so
	// it stays BLOCKED past its deadline).
	rec, err := st.GetEvent(ctx, behind[1])
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the deadline passes", func() bool { return time.Now().After(rec.ExpiresAt.Add(50 * time.Millisecond)) })

	t.Run("auth", func(t *testing.T) {
		client{t, base, ""}.get("/api/v1/events").want(t, http.StatusUnauthorized)
		client{t, base, "not-a-token-of-this-server"}.get("/api/v1/stats").want(t, http.StatusUnauthorized)
		viewer.get("/api/v1/stats").want(t, http.StatusOK)
		viewer.post("/api/v1/events/"+heads[0].String()+"/retry").want(t, http.StatusForbidden)
		viewer.post("/api/v1/events/retry?dry_run=true").want(t, http.StatusForbidden)
		viewer.post("/api/v1/purge?older_than=1h&dry_run=true").want(t, http.StatusForbidden)
		if s := statusOf(t, st, heads[0]); s != outbox.StatusFailed {
			t.Fatalf("a viewer's refused retry changed the event to %s", s)
		}
	})

	t.Run("list filters and paging", func(t *testing.T) {
		var l listAnswer
		viewer.get("/api/v1/events?status=failed").want(t, 200).decode(t, &l)
		if len(l.Events) != 3 || l.Next != "" {
			t.Fatalf("FAILED: %d events, next %q; want 3 and no next", len(l.Events), l.Next)
		}
		for _, e := range l.Events {
			if e.Status != "FAILED" || !contains(e.LastError, "status 503") || e.Route != "payment.events" {
				t.Fatalf("FAILED filter returned %+v", e)
			}
		}
		viewer.get("/api/v1/events?aggregate_id=p-1&event_type=Captured").want(t, 200).decode(t, &l)
		if len(l.Events) != 1 || l.Events[0].EventID != behind[1].String() {
			t.Fatalf("aggregate_id+event_type: %+v", l.Events)
		}
		viewer.get("/api/v1/events?error="+url.QueryEscape("Service Unavail")).want(t, 200).decode(t, &l)
		if len(l.Events) != 3 {
			t.Fatalf("error substring: %d events, want 3", len(l.Events))
		}
		viewer.get("/api/v1/events?error="+url.QueryEscape("100%_")).want(t, 200).decode(t, &l)
		if len(l.Events) != 0 {
			t.Fatalf("error with LIKE characters matched %d events, want 0", len(l.Events))
		}
		viewer.get("/api/v1/events?route=merchant.events").want(t, 200).decode(t, &l)
		if len(l.Events) != 1 || l.Events[0].EventID != later[0].String() {
			t.Fatalf("route filter: %+v", l.Events)
		}
		future := url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
		viewer.get("/api/v1/events?created_after="+future).want(t, 200).decode(t, &l)
		if len(l.Events) != 0 {
			t.Fatalf("created_after an hour from now: %d events", len(l.Events))
		}
		past := url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
		viewer.get("/api/v1/events?created_after="+past+"&created_before="+future).want(t, 200).decode(t, &l)
		if len(l.Events) != 6 {
			t.Fatalf("created in the last hour: %d events, want 6", len(l.Events))
		}

		// Cursor paging visits every event once, newest first.
		seen := map[string]bool{}
		path := "/api/v1/events?limit=2"
		pages := 0
		for {
			viewer.get(path).want(t, 200).decode(t, &l)
			pages++
			for _, e := range l.Events {
				if seen[e.EventID] {
					t.Fatalf("event %s on two pages", e.EventID)
				}
				seen[e.EventID] = true
			}
			if l.Next == "" {
				break
			}
			path = "/api/v1/events?limit=2&cursor=" + url.QueryEscape(l.Next)
			if pages > 10 {
				t.Fatal("paging does not end")
			}
		}
		if len(seen) != 6 || pages != 3 {
			t.Fatalf("paging saw %d events in %d pages, want 6 in 3", len(seen), pages)
		}
		viewer.get("/api/v1/events?limit=1000000").want(t, 200).decode(t, &l)
		if l.Limit != store.MaxQueryLimit {
			t.Fatalf("limit not clamped: %d", l.Limit)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, q := range []string{"status=DONE", "created_after=yesterday", "limit=-1", "limit=x", "cursor=garbage",
			"statuss=FAILED", "created_after=2026-01-02T00:00:00Z&created_before=2025-01-01T00:00:00Z"} {
			a := viewer.get("/api/v1/events?"+q).want(t, http.StatusBadRequest)
			var e struct{ Error string }
			a.decode(t, &e)
			if e.Error == "" {
				t.Fatalf("%s: 400 without a reason", q)
			}
		}
		viewer.get("/api/v1/events/not-a-uuid").want(t, http.StatusBadRequest)
		viewer.get("/api/v1/events/"+outbox.NewEventID().String()).want(t, http.StatusNotFound)
		op.post("/api/v1/events/"+outbox.NewEventID().String()+"/retry").want(t, http.StatusNotFound)
		op.post("/api/v1/events/retry?status=PENDING").want(t, http.StatusBadRequest)
		op.post("/api/v1/events/"+heads[0].String()+"/retry?ttl=forever").want(t, http.StatusBadRequest)
		op.post("/api/v1/purge?dry_run=true").want(t, http.StatusBadRequest)
	})

	t.Run("detail", func(t *testing.T) {
		var d struct {
			EventID  string            `json:"event_id"`
			Status   string            `json:"status"`
			Payload  map[string]any    `json:"payload"`
			Headers  map[string]string `json:"headers"`
			Attempts []struct {
				Outcome string          `json:"outcome"`
				RelayID string          `json:"relay_id"`
				Error   string          `json:"error"`
				TraceID string          `json:"trace_id"`
				Receipt json.RawMessage `json:"receipt"`
			} `json:"attempts"`
		}
		viewer.get("/api/v1/events/"+heads[1].String()).want(t, 200).decode(t, &d)
		if d.Status != "FAILED" || d.Payload["aggregate"] != "p-2" || d.Headers["traceparent"] == "" {
			t.Fatalf("detail: %+v", d)
		}
		var receipt bytes.Buffer
		if len(d.Attempts) == 1 {
			_ = json.Compact(&receipt, d.Attempts[0].Receipt) // the API indents its answers
		}
		if len(d.Attempts) != 1 || d.Attempts[0].Outcome != "FAILED" || d.Attempts[0].RelayID != "test-relay" ||
			!contains(d.Attempts[0].Error, "503") || d.Attempts[0].TraceID != testTraceID || receipt.String() != testReceipt {
			t.Fatalf("timeline: %+v (want the attempt's trace id %s and receipt %s)", d.Attempts, testTraceID, testReceipt)
		}
	})

	t.Run("failure groups and blocked", func(t *testing.T) {
		var g struct {
			Groups []struct {
				Route, Fingerprint string
				HTTPStatus         int `json:"http_status"`
				Count              int
				EventIDs           []string `json:"event_ids"`
			}
		}
		viewer.get("/api/v1/failure-groups").want(t, 200).decode(t, &g)
		if len(g.Groups) != 1 || g.Groups[0].Count != 3 || g.Groups[0].HTTPStatus != 503 || g.Groups[0].Route != "payment.events" ||
			contains(g.Groups[0].Fingerprint, heads[0].String()) {
			t.Fatalf("failure groups: %+v", g.Groups)
		}
		var bl struct {
			Aggregates []struct {
				AggregateID string `json:"aggregate_id"`
				Head        struct {
					EventID string `json:"event_id"`
				}
				BlockedCount int64 `json:"blocked_count"`
			}
		}
		viewer.get("/api/v1/blocked").want(t, 200).decode(t, &bl)
		if len(bl.Aggregates) != 1 || bl.Aggregates[0].AggregateID != "p-1" || bl.Aggregates[0].Head.EventID != heads[0].String() ||
			bl.Aggregates[0].BlockedCount < 1 {
			t.Fatalf("blocked: %+v", bl.Aggregates)
		}
	})

	t.Run("stats and relays", func(t *testing.T) {
		aq := st.AdminQueries()
		defer aq.Close()
		if err := aq.Heartbeat(ctx, store.RelayHeartbeat{RelayID: "relay-a", Host: "host-a", InFlight: 2}); err != nil {
			t.Fatal(err)
		}
		var s struct {
			Counts            map[string]int64
			DeadLetters       int64 `json:"dead_letters"`
			Relays            int
			FailedLastHour    int64 `json:"failed_last_hour"`
			BlockedAggregates int64 `json:"blocked_aggregates"`
		}
		viewer.get("/api/v1/stats").want(t, 200).decode(t, &s)
		if s.Counts["FAILED"] != 3 || s.DeadLetters != 3 || s.Relays != 1 || s.FailedLastHour != 3 || s.BlockedAggregates != 1 {
			t.Fatalf("stats: %+v", s)
		}
		var r struct {
			Relays []struct {
				RelayID  string `json:"relay_id"`
				Host     string
				InFlight int `json:"batches_in_flight"`
			}
		}
		viewer.get("/api/v1/relays").want(t, 200).decode(t, &r)
		if len(r.Relays) != 1 || r.Relays[0].RelayID != "relay-a" || r.Relays[0].Host != "host-a" || r.Relays[0].InFlight != 2 {
			t.Fatalf("relays: %+v", r.Relays)
		}
		if err := aq.RemoveRelay(ctx, "relay-a"); err != nil {
			t.Fatal(err)
		}
		viewer.get("/api/v1/relays").want(t, 200).decode(t, &r)
		if len(r.Relays) != 0 {
			t.Fatalf("removed relay still listed: %+v", r.Relays)
		}
	})

	t.Run("dry run changes nothing", func(t *testing.T) {
		var a actionAnswer
		op.post("/api/v1/events/retry?dry_run=true&aggregate_id=p-1").want(t, 200).decode(t, &a)
		if !a.DryRun || a.Matched != 1 || a.Applied != 0 || a.BlockedReleased != 2 || a.PastDeadline != 1 ||
			!contains(a.Summary, "1 is past the deadline and will go EXPIRED") {
			t.Fatalf("dry run: %+v", a)
		}
		op.post("/api/v1/events/"+heads[0].String()+"/skip?dry_run=true").want(t, 200).decode(t, &a)
		if a.Matched != 1 || a.BlockedReleased != 2 {
			t.Fatalf("single dry run: %+v", a)
		}
		if s := statusOf(t, st, heads[0]); s != outbox.StatusFailed {
			t.Fatalf("dry run changed the event to %s", s)
		}
	})

	t.Run("two operators at once: one wins, the other gets 409", func(t *testing.T) {
		var wg sync.WaitGroup
		codes := make([]int, 2)
		for i, c := range []client{op, op2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes[i] = c.do("POST", "/api/v1/events/"+heads[1].String()+"/retry").status
			}()
		}
		wg.Wait()
		if !(codes[0] == 200 && codes[1] == 409 || codes[0] == 409 && codes[1] == 200) {
			t.Fatalf("codes %v, want one 200 and one 409", codes)
		}
		if s := statusOf(t, st, heads[1]); s != outbox.StatusPending {
			t.Fatalf("retried event is %s", s)
		}
		op.post("/api/v1/events/"+heads[1].String()+"/retry").want(t, http.StatusConflict)
	})

	t.Run("retry by filter in pages, audited per event", func(t *testing.T) {
		var a actionAnswer
		op.post("/api/v1/events/retry?status=FAILED&error=503&reason="+url.QueryEscape("gateway is back")).want(t, 200).decode(t, &a)
		if a.DryRun || a.Matched != 2 || a.Applied != 2 || a.Actor != "alice" {
			t.Fatalf("bulk retry: %+v", a)
		}
		for _, id := range []outbox.EventID{heads[0], heads[2]} {
			if s := statusOf(t, st, id); s != outbox.StatusPending {
				t.Fatalf("event %s is %s after the bulk retry", id, s)
			}
			atts, err := st.Attempts(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			last := atts[len(atts)-1]
			if last.Outcome != store.Requeued || last.RelayID != "operator:alice" || !contains(last.Error, "gateway is back") {
				t.Fatalf("audit row: %+v", last)
			}
		}
	})

	t.Run("purge dry run", func(t *testing.T) {
		var a actionAnswer
		op.post("/api/v1/purge?older_than=0s&status=EXPIRED&dry_run=true").want(t, 200).decode(t, &a)
		if !a.DryRun || a.Applied != 0 {
			t.Fatalf("purge dry run: %+v", a)
		}
	})
}

func TestBulkActionPagesAndAuditsEveryEvent(t *testing.T) {
	b := newPostgres(t)
	base := serve(t, admin.Config{Store: b.store, BulkPageSize: 7, FailedBlocks: true})
	const n = 40
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = payment(fmt.Sprintf("bulk-%d", i), 0)
	}
	b.enqueue(t, events...)
	failed := failHeads(t, b.store, "status 500 Internal Server Error")
	if len(failed) != n {
		t.Fatalf("failed %d, want %d", len(failed), n)
	}
	var a actionAnswer
	client{t, base, operatorToken}.post("/api/v1/events/skip?status=FAILED").want(t, 200).decode(t, &a)
	if a.Matched != n || a.Applied != n {
		t.Fatalf("bulk skip: %+v", a)
	}
	wantSkippedBy(t, b.store, "operator:alice", failed)
}

func TestRedactPayloadsHidesThemFromViewers(t *testing.T) {
	b := newSQLite(t)
	base := serve(t, admin.Config{Store: b.store, RedactPayloads: true})
	id := b.enqueue(t, payment("r-1", 1))[0]
	a := client{t, base, viewerToken}.get("/api/v1/events/"+id.String()).want(t, 200)
	if contains(string(a.body), "4111-secret-pan") || contains(string(a.body), "0af7651916cd43dd") {
		t.Fatalf("a viewer sees the payload or a header value: %s", a.body)
	}
	a = client{t, base, operatorToken}.get("/api/v1/events/"+id.String()).want(t, 200)
	if !contains(string(a.body), "4111-secret-pan") {
		t.Fatalf("an operator does not see the payload: %s", a.body)
	}
}

func TestNewRefusesMissingAuth(t *testing.T) {
	b := newSQLite(t)
	if _, err := admin.New(admin.Config{Store: b.store}); err == nil || !contains(err.Error(), "tokens") {
		t.Fatalf("New without tokens: %v", err)
	}
	_, err := admin.New(admin.Config{Store: b.store, Tokens: []admin.Token{{Role: admin.Viewer, Name: "x", Token: "tiny-tok"}}})
	if err == nil || contains(err.Error(), "tiny-tok") {
		t.Fatalf("short token: %v (must be refused without quoting it)", err)
	}
}
