package admin_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox/admin"
	"github.com/txoutbox/outbox/internal/testenv/pgtest"
	"github.com/txoutbox/outbox/store"
)

// TestEventAtEachDestination: with a fan-out, an event's detail (API and
// page) shows its copy at each destination: its status there, retries
// and attempts, or that the destination has no copy.
func TestEventAtEachDestination(t *testing.T) {
	_, outboxStore := pgtest.Outbox(t, "admevo")
	_, gw := pgtest.Outbox(t, "admevg")
	_, ledger := pgtest.Outbox(t, "admevl")
	base := serve(t, admin.Config{Store: outboxStore, Destinations: []admin.Destination{
		{Name: "gateway", Table: gw.Table(), URL: "https://gw.test/approve", Store: gw},
		{Name: "ledger", Table: ledger.Table(), URL: "kafka://broker:9092?topic=ledger", Store: ledger},
	}})
	viewer := client{t, base, viewerToken}

	ev := payment("tx-9", 1)
	destEnqueue(t, outboxStore, ev)
	recs, err := outboxStore.ListEvents(context.Background(), store.ListFilter{Limit: 10})
	if err != nil || len(recs) != 1 {
		t.Fatalf("list: %v (%d)", err, len(recs))
	}
	id := recs[0].EventID
	// Routed to the gateway only, and delivered there.
	if _, err := gw.CopyEvents(context.Background(), outboxStore.Table(), []int64{recs[0].ID}); err != nil {
		t.Fatal(err)
	}
	deliverOne(t, gw, 10*time.Millisecond)

	var got struct {
		Status       string
		Destinations []struct {
			Name, Table string
			Status      *string
			Attempts    []struct{ Outcome string }
		}
	}
	viewer.get("/api/v1/events/"+id.String()).want(t, 200).decode(t, &got)
	if len(got.Destinations) != 2 {
		t.Fatalf("destinations %+v, want gateway and ledger", got.Destinations)
	}
	g, l := got.Destinations[0], got.Destinations[1]
	if g.Name != "gateway" || g.Table != gw.Table() || g.Status == nil || *g.Status != "PROCESSED" {
		t.Errorf("gateway: %+v, want its copy PROCESSED", g)
	}
	if l.Name != "ledger" || l.Status != nil || len(l.Attempts) != 0 {
		t.Errorf("ledger: %+v, want no copy", l)
	}
	c := browserless(t)
	if resp, _ := fetch(t, c, "POST", base+"/login", url.Values{"token": {viewerToken}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	_, page := fetch(t, c, "GET", base+"/events/"+id.String(), nil)
	for _, want := range []string{"At each destination", gw.Table(), "PROCESSED", "no copy"} {
		if !strings.Contains(page, want) {
			t.Errorf("the event page lacks %q:\n%s", want, page)
		}
	}
}
