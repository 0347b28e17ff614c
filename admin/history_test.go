package admin_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/txoutbox/outbox/admin"
	"github.com/txoutbox/outbox/store"
)

// TestEventFromHistory: an event that moved into the history is served by
// the event API (from_history, with its attempts) and the event page
// (which says so and offers no retry), on every backend.
func TestEventFromHistory(t *testing.T) {
	for _, bc := range backends {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			b := bc.open(t)
			ctx := context.Background()
			base := serve(t, admin.Config{Store: b.store})
			id := b.enqueue(t, payment("hist-1", 1))[0]
			c, err := b.store.Claim(ctx, store.ClaimRequest{RelayID: "test-relay", Limit: 10, Lease: time.Minute})
			if err != nil || len(c.Events) != 1 {
				t.Fatalf("claim = %+v, %v", c, err)
			}
			e := c.Events[0]
			if _, err := b.store.Complete(ctx, store.CompleteRequest{Token: c.Token, RelayID: "test-relay", Outcomes: []store.Outcome{{
				ID: e.ID, EventID: e.EventID, Kind: store.Expired, Attempt: 1, Attempted: true, Error: "deadline passed",
				StartedAt: c.DBTime, FinishedAt: c.DBTime}}}); err != nil {
				t.Fatal(err)
			}
			if n, err := b.store.MoveToHistory(ctx, store.HistoryMoveRequest{}); err != nil || n != 1 {
				t.Fatalf("move = %d, %v; want 1", n, err)
			}
			var d struct {
				Status      string `json:"status"`
				FromHistory bool   `json:"from_history"`
				Attempts    []struct {
					Outcome string `json:"outcome"`
				} `json:"attempts"`
			}
			client{t, base, operatorToken}.get("/api/v1/events/"+id.String()).want(t, 200).decode(t, &d)
			if !d.FromHistory || d.Status != "EXPIRED" || len(d.Attempts) != 1 || d.Attempts[0].Outcome != "EXPIRED" {
				t.Fatalf("event from history = %+v; want EXPIRED, from_history, its attempt", d)
			}
			hc := browserless(t)
			if resp, _ := fetch(t, hc, "POST", base+"/login", url.Values{"token": {operatorToken}}); resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("login: %d", resp.StatusCode)
			}
			_, page := fetch(t, hc, "GET", base+"/events/"+id.String(), nil)
			if !contains(page, `id="from-history"`) || !contains(page, "an event in the history cannot be retried") {
				t.Fatalf("the event page does not say the event is in the history, or offers a retry:\n%s", page)
			}
		})
	}
}
