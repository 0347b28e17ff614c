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

	// The ledger refuses its copy for good; an operator retries it there
	// only, through the API and through the page.
	if _, err := ledger.CopyEvents(context.Background(), outboxStore.Table(), []int64{recs[0].ID}); err != nil {
		t.Fatal(err)
	}
	failHeads(t, ledger, "status 422")
	op := client{t, base, operatorToken}
	op.post("/api/v1/events/"+id.String()+"/retry?destination=nowhere&reason=x").want(t, 404)
	op.post("/api/v1/events/"+id.String()+"/retry?destination=ledger&reason=ledger+fixed").want(t, 200)
	rec, err := ledger.GetEvent(context.Background(), id)
	if err != nil || rec.Status != "PENDING" {
		t.Fatalf("ledger copy after the retry: %v %v, want PENDING", rec.Status, err)
	}
	if rec, err := outboxStore.GetEvent(context.Background(), id); err != nil || rec.Status != "PENDING" {
		t.Fatalf("the outbox row: %v %v, want it untouched (PENDING)", rec.Status, err)
	}
	atts, err := ledger.Attempts(context.Background(), id)
	if err != nil || len(atts) == 0 || atts[len(atts)-1].RelayID != "operator:alice" {
		t.Fatalf("ledger attempts %+v (%v): want the operator's retry audited there", atts, err)
	}
	failHeads(t, ledger, "status 422")
	oc := browserless(t)
	if resp, _ := fetch(t, oc, "POST", base+"/login", url.Values{"token": {operatorToken}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	_, page = fetch(t, oc, "GET", base+"/events/"+id.String(), nil)
	m := csrfRE.FindStringSubmatch(page)
	if m == nil || !strings.Contains(page, "Retry here") {
		t.Fatalf("no per-destination retry on the event page:\n%s", page)
	}
	_, confirm := fetch(t, oc, "POST", base+"/events/"+id.String()+"/retry", url.Values{"csrf_token": {m[1]}, "destination": {"ledger"}})
	if !strings.Contains(confirm, `At destination <strong id="destination">ledger</strong> only`) {
		t.Fatalf("the confirmation does not name the destination:\n%s", confirm)
	}
	resp, _ := fetch(t, oc, "POST", base+"/events/"+id.String()+"/retry", url.Values{"csrf_token": {m[1]}, "destination": {"ledger"}, "confirm": {"yes"}, "reason": {"again"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("confirmed retry: %d", resp.StatusCode)
	}
	if rec, err := ledger.GetEvent(context.Background(), id); err != nil || rec.Status != "PENDING" {
		t.Fatalf("ledger copy after the page's retry: %v %v, want PENDING", rec.Status, err)
	}
}
