package admin_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/admin"
	"github.com/txoutbox/outbox/internal/testenv/pgtest"
	"github.com/txoutbox/outbox/store"
)

// deliverAll claims every claimable event and records it delivered.
func deliverAll(t testing.TB, st store.Store) {
	t.Helper()
	ctx := context.Background()
	c, err := st.Claim(ctx, store.ClaimRequest{RelayID: "test-relay", Limit: 1000, Lease: time.Minute, FailedBlocks: true})
	if err != nil {
		t.Fatal(err)
	}
	req := store.CompleteRequest{Token: c.Token, RelayID: "test-relay", FailedBlocks: true}
	for _, e := range c.Events {
		req.Outcomes = append(req.Outcomes, store.Outcome{ID: e.ID, EventID: e.EventID, Kind: store.Delivered, Attempt: e.Attempt,
			Attempted: true, StartedAt: c.DBTime, FinishedAt: c.DBTime})
	}
	if _, err := st.Complete(ctx, req); err != nil {
		t.Fatal(err)
	}
}

type replayAnswer struct {
	DryRun     bool   `json:"dry_run"`
	Actor      string `json:"actor"`
	Events     int64  `json:"events"`
	Aggregates int64  `json:"aggregates"`
	Held       []struct {
		AggregateID string `json:"aggregate_id"`
		Status      string `json:"status"`
	} `json:"held"`
	Summary string `json:"summary"`
}

// TestAPIReplay: POST /api/v1/events/replay counts in a dry run and
// changes nothing, replays the aggregate's delivered events for an
// operator (audited with the token's name and the reason), refuses a
// viewer, a missing reason, no filter and unknown parameters.
func TestAPIReplay(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			b := b.open(t)
			st := b.store
			base := serve(t, admin.Config{Store: st, FailedBlocks: true})
			viewer, op := client{t, base, viewerToken}, client{t, base, operatorToken}
			ids := b.enqueue(t, payment("r-x", 1), payment("r-x", 2), payment("r-y", 1))
			deliverAll(t, st)
			target := "/api/v1/events/replay?aggregate_type=payment&aggregate_id=r-x&reason=" + url.QueryEscape("ledger rebuilt")

			viewer.post(target+"&dry_run=true").want(t, http.StatusForbidden)
			for _, bad := range []string{
				"/api/v1/events/replay?aggregate_type=payment&aggregate_id=r-x",
				"/api/v1/events/replay?reason=x",
				"/api/v1/events/replay?aggregate_type=payment&reason=x&status=FAILED",
				"/api/v1/events/replay?aggregate_type=payment&reason=x&since=yesterday",
			} {
				op.post(bad).want(t, http.StatusBadRequest)
			}
			var a replayAnswer
			op.post(target+"&dry_run=true").want(t, http.StatusOK).decode(t, &a)
			if !a.DryRun || a.Events != 2 || a.Aggregates != 1 || a.Actor != "alice" || !strings.Contains(a.Summary, "would replay 2 events") {
				t.Fatalf("dry run: %+v", a)
			}
			for _, id := range ids {
				if s := statusOf(t, st, id); s != outbox.StatusProcessed {
					t.Fatalf("the dry run changed event %s to %s", id, s)
				}
			}
			op.post(target).want(t, http.StatusOK).decode(t, &a)
			if a.DryRun || a.Events != 2 || a.Aggregates != 1 || len(a.Held) != 0 {
				t.Fatalf("replay: %+v", a)
			}
			for i, want := range []outbox.Status{outbox.StatusPending, outbox.StatusPending, outbox.StatusProcessed} {
				if s := statusOf(t, st, ids[i]); s != want {
					t.Errorf("event %d after the replay: %s, want %s", i, s, want)
				}
			}
			atts, err := st.Attempts(context.Background(), ids[0])
			if err != nil {
				t.Fatal(err)
			}
			last := atts[len(atts)-1]
			if last.Outcome != store.Replayed || last.RelayID != "operator:alice" || !strings.Contains(last.Error, "ledger rebuilt") {
				t.Errorf("the audit row of the replay: %+v", last)
			}
		})
	}
}

// TestDashboardReplay: the event page of a delivered event offers the
// replay of its aggregate; the dry run asks to confirm with the count, the
// confirmation replays.
func TestDashboardReplay(t *testing.T) {
	b := newSQLite(t)
	base := serve(t, admin.Config{Store: b.store, FailedBlocks: true})
	ids := b.enqueue(t, payment("ui-r", 1), payment("ui-r", 2))
	deliverAll(t, b.store)
	c := browserless(t)
	if resp, _ := fetch(t, c, "POST", base+"/login", url.Values{"token": {operatorToken}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	page := base + "/events/" + ids[0].String()
	_, body := fetch(t, c, "GET", page, nil)
	m := csrfRE.FindStringSubmatch(body)
	if m == nil || !strings.Contains(body, `id="replay"`) || strings.Contains(body, `id="replay" disabled`) {
		t.Fatalf("the event page of a delivered event has no replay control:\n%s", body)
	}
	if resp, _ := fetch(t, c, "POST", page+"/replay", url.Values{"csrf_token": {m[1]}}); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a replay without a reason: %d, want 400", resp.StatusCode)
	}
	_, body = fetch(t, c, "POST", page+"/replay", url.Values{"csrf_token": {m[1]}, "reason": {"consumer rebuilt"}})
	if !strings.Contains(body, "would replay 2 events of 1 aggregate") || !strings.Contains(body, "Confirm replay of 2 events") ||
		statusOf(t, b.store, ids[0]) != outbox.StatusProcessed {
		t.Fatalf("dry run page:\n%s", body)
	}
	resp, _ := fetch(t, c, "POST", page+"/replay", url.Values{"csrf_token": {m[1]}, "reason": {"consumer rebuilt"}, "confirm": {"yes"}})
	if resp.StatusCode != http.StatusSeeOther || statusOf(t, b.store, ids[0]) != outbox.StatusPending || statusOf(t, b.store, ids[1]) != outbox.StatusPending {
		t.Fatalf("confirmed replay: %d, events %s %s", resp.StatusCode, statusOf(t, b.store, ids[0]), statusOf(t, b.store, ids[1]))
	}
}

// TestReplayAtOneDestination: with a fan-out, a replay names the
// destination whose copies it sends again (API and event page); without
// one it is refused, and the outbox's own row is never touched.
func TestReplayAtOneDestination(t *testing.T) {
	_, outboxStore := pgtest.Outbox(t, "admrpo")
	_, gw := pgtest.Outbox(t, "admrpg")
	base := serve(t, admin.Config{Store: outboxStore, Destinations: []admin.Destination{
		{Name: "gateway", Table: gw.Table(), URL: "https://gw.test/approve", Store: gw},
	}})
	ctx := context.Background()
	destEnqueue(t, outboxStore, payment("tx-r", 1))
	recs, err := outboxStore.ListEvents(ctx, store.ListFilter{Limit: 10})
	if err != nil || len(recs) != 1 {
		t.Fatalf("list: %v (%d)", err, len(recs))
	}
	id := recs[0].EventID
	if _, err := gw.CopyEvents(ctx, outboxStore.Table(), []int64{recs[0].ID}); err != nil {
		t.Fatal(err)
	}
	deliverOne(t, gw, 10*time.Millisecond)
	op := client{t, base, operatorToken}
	target := "/api/v1/events/replay?aggregate_type=payment&aggregate_id=tx-r&reason=gateway+lost+it&dry_run=true"
	if a := op.post(target).want(t, http.StatusBadRequest); !strings.Contains(string(a.body), "give destination (one of gateway)") {
		t.Fatalf("a replay without a destination: %s", a.body)
	}
	var a replayAnswer
	op.post(target+"&destination=gateway").want(t, http.StatusOK).decode(t, &a)
	if a.Events != 1 {
		t.Fatalf("dry run at the gateway: %+v, want 1 event", a)
	}

	c := browserless(t)
	if resp, _ := fetch(t, c, "POST", base+"/login", url.Values{"token": {operatorToken}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	_, page := fetch(t, c, "GET", base+"/events/"+id.String(), nil)
	m := csrfRE.FindStringSubmatch(page)
	if m == nil || !strings.Contains(page, "Replay aggregate here") {
		t.Fatalf("no per-destination replay on the event page:\n%s", page)
	}
	form := url.Values{"csrf_token": {m[1]}, "destination": {"gateway"}, "reason": {"gateway lost it"}}
	if _, confirm := fetch(t, c, "POST", base+"/events/"+id.String()+"/replay", form); !strings.Contains(confirm,
		`At destination <strong id="destination">gateway</strong> only`) || !strings.Contains(confirm, "would replay 1 event") {
		t.Fatalf("the confirmation does not name the destination and the count:\n%s", confirm)
	}
	form.Set("confirm", "yes")
	if resp, _ := fetch(t, c, "POST", base+"/events/"+id.String()+"/replay", form); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("confirmed replay: %d", resp.StatusCode)
	}
	if s := statusOf(t, gw, id); s != outbox.StatusPending {
		t.Errorf("the gateway's copy after the replay: %s, want PENDING", s)
	}
	if s := statusOf(t, outboxStore, id); s != outbox.StatusPending {
		t.Errorf("the outbox row (never claimed here): %s, want it untouched", s)
	}
}
