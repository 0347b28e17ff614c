package admin_test

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/admin"
	"github.com/txoutbox/outbox/internal/testenv/pgtest"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/postgres"
)

// destinationsAnswer is the answer of GET /api/v1/destinations.
type destinationsAnswer struct {
	Destinations []struct {
		Name               string  `json:"name"`
		Table              string  `json:"table"`
		URL                string  `json:"url"`
		OpenRoutes         int     `json:"open_routes"`
		Backlog            int64   `json:"backlog"`
		InFlight           int64   `json:"in_flight"`
		Failed             int64   `json:"failed"`
		DeliveredPerMinute float64 `json:"delivered_per_minute"`
		Recent             struct {
			Delivered int64 `json:"delivered"`
			Failed    int64 `json:"failed"`
		} `json:"last_5m"`
		P99PublishMS   *float64 `json:"p99_publish_ms"`
		P99PublishNote string   `json:"p99_publish_note"`
		Error          string   `json:"error"`
		Routes         []struct {
			Route     string     `json:"route"`
			State     string     `json:"state"`
			OpenSince *time.Time `json:"open_since"`
			NextProbe *time.Time `json:"next_probe"`
			LastError string     `json:"last_error"`
			Opens     int        `json:"opens"`
			Forced    bool       `json:"forced"`
		} `json:"routes"`
	} `json:"destinations"`
}

// destEnqueue writes events into a PostgreSQL destination table.
func destEnqueue(t *testing.T, s *postgres.Store, events ...outbox.Event) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := s.Enqueue(ctx, tx, events...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// deliverOne claims one event of st and records it delivered, published
// in the duration given.
func deliverOne(t *testing.T, st store.Store, publish time.Duration) {
	t.Helper()
	ctx := context.Background()
	c, err := st.Claim(ctx, store.ClaimRequest{RelayID: "dest-test-relay", Limit: 1, Lease: time.Minute})
	if err != nil || len(c.Events) != 1 {
		t.Fatalf("claim: %v (%d events)", err, len(c.Events))
	}
	e := c.Events[0]
	o := store.Outcome{ID: e.ID, EventID: e.EventID, Attempt: 1, Kind: store.Delivered, Attempted: true, StartedAt: c.DBTime, FinishedAt: c.DBTime.Add(publish)}
	if _, err := st.Complete(ctx, store.CompleteRequest{Token: c.Token, RelayID: "dest-test-relay", Outcomes: []store.Outcome{o}}); err != nil {
		t.Fatal(err)
	}
}

// relayOpens opens route's breaker as a relay does when the destination
// fails.
func relayOpens(t testing.TB, st store.Store, route, lastError string) {
	t.Helper()
	ok, err := st.ChangeRoute(context.Background(), store.RouteChange{Route: route, To: store.BreakerOpen, ProbeIn: time.Minute,
		Opens: 1, Actor: "relay-7", Reason: "5 failures in a row", LastError: lastError})
	if err != nil || !ok {
		t.Fatalf("a relay opening %s: applied %v, %v", route, ok, err)
	}
}

// TestDestinationsAPI serves two destinations, each with its own table on
// PostgreSQL: their figures and breakers are each their own; an operator
// opens and closes a route by hand with a reason, which the route log
// keeps under the operator's name; a viewer may not.
func TestDestinationsAPI(t *testing.T) {
	_, outboxStore := pgtest.Outbox(t, "admdst")
	_, gw := pgtest.Outbox(t, "admgw")
	_, ledger := pgtest.Outbox(t, "admld")
	base := serve(t, admin.Config{Store: outboxStore, Destinations: []admin.Destination{
		{Name: "gateway", Table: gw.Table(), URL: "https://user:xxxxx@gw.test/approve", Store: gw},
		{Name: "ledger", Table: ledger.Table(), URL: "kafka://broker:9092?topic=ledger", Store: ledger},
	}})
	viewer, op := client{t, base, viewerToken}, client{t, base, operatorToken}

	destEnqueue(t, gw, payment("tx-1", 1), payment("tx-2", 1), payment("tx-3", 1), payment("tx-4", 1))
	deliverOne(t, gw, 40*time.Millisecond)
	if _, err := gw.Claim(context.Background(), store.ClaimRequest{RelayID: "dest-test-relay", Limit: 1, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	relayOpens(t, ledger, "ledger.events", "kafka: broker unreachable")

	var got destinationsAnswer
	viewer.get("/api/v1/destinations").want(t, 200).decode(t, &got)
	if len(got.Destinations) != 2 {
		t.Fatalf("%d destinations, want 2: %+v", len(got.Destinations), got)
	}
	g, l := got.Destinations[0], got.Destinations[1]
	if g.Name != "gateway" || g.Table != gw.Table() || g.URL != "https://user:xxxxx@gw.test/approve" || l.Name != "ledger" || l.Table != ledger.Table() {
		t.Fatalf("destinations: %+v", got)
	}
	if g.Backlog != 2 || g.InFlight != 1 || g.Recent.Delivered != 1 || g.DeliveredPerMinute != 0.2 || len(g.Routes) != 0 || g.Error != "" {
		t.Fatalf("gateway: %+v", g)
	}
	// The gateway's one delivery took 40 ms to publish; the ledger had
	// none.
	if g.P99PublishMS == nil || *g.P99PublishMS != 40 || g.P99PublishNote != "" {
		t.Fatalf("gateway's p99: %v %q, want 40 ms", ptrString(g.P99PublishMS), g.P99PublishNote)
	}
	if l.P99PublishMS != nil || l.P99PublishNote != "no delivery in the last 5 minutes" {
		t.Fatalf("ledger's p99: %v %q, want null: no delivery", ptrString(l.P99PublishMS), l.P99PublishNote)
	}
	if l.Backlog != 0 || l.InFlight != 0 || len(l.Routes) != 1 || l.OpenRoutes != 1 || g.OpenRoutes != 0 {
		t.Fatalf("ledger: %+v", l)
	}
	if r := l.Routes[0]; r.Route != "ledger.events" || r.State != "OPEN" || r.OpenSince == nil || r.NextProbe == nil ||
		r.Opens != 1 || r.Forced || r.LastError != "kafka: broker unreachable" {
		t.Fatalf("ledger's route: %+v", r)
	}

	// Refusals.
	q := "?route=payment.events&reason=" + url.QueryEscape("gateway answers 503 to everything")
	viewer.post("/api/v1/destinations/gateway/open"+q).want(t, 403)
	if a := op.post("/api/v1/destinations/gateway/open?route=payment.events"); a.status != 400 || !contains(string(a.body), "reason is required") {
		t.Fatalf("open without a reason: %d %s", a.status, a.body)
	}
	if a := op.post("/api/v1/destinations/gateway/open?reason=x"); a.status != 400 || !contains(string(a.body), "route is required") {
		t.Fatalf("open without a route: %d %s", a.status, a.body)
	}
	if a := op.post("/api/v1/destinations/nope/open" + q); a.status != 404 || !contains(string(a.body), "gateway, ledger") {
		t.Fatalf("unknown destination: %d %s", a.status, a.body)
	}
	op.post("/api/v1/destinations/gateway/open"+q+"&force=1").want(t, 400)
	var dry struct {
		DryRun  bool   `json:"dry_run"`
		From    string `json:"from"`
		Summary string `json:"summary"`
	}
	op.post("/api/v1/destinations/gateway/open"+q+"&dry_run=true").want(t, 200).decode(t, &dry)
	if !dry.DryRun || dry.From != "CLOSED" || !strings.HasPrefix(dry.Summary, "would open") {
		t.Fatalf("dry run: %+v", dry)
	}
	if snap, _ := gw.Routes(context.Background()); len(snap.Routes) != 0 {
		t.Fatalf("a refusal or dry run changed a route: %+v", snap.Routes)
	}

	// Open by hand: forced, one opening, never probed, audited.
	var res struct {
		Actor, From, To, Summary string
	}
	op.post("/api/v1/destinations/gateway/open"+q).want(t, 200).decode(t, &res)
	if res.Actor != "alice" || res.From != "CLOSED" || res.To != "OPEN" {
		t.Fatalf("open: %+v", res)
	}
	got = destinationsAnswer{}
	viewer.get("/api/v1/destinations").want(t, 200).decode(t, &got)
	g = got.Destinations[0]
	if len(g.Routes) != 1 || g.Routes[0].State != "OPEN" || !g.Routes[0].Forced || g.Routes[0].Opens != 1 || g.Routes[0].NextProbe != nil {
		t.Fatalf("gateway after the open: %+v", g.Routes)
	}
	if len(got.Destinations[1].Routes) != 1 || got.Destinations[1].Routes[0].Opens != 1 {
		t.Fatalf("the open touched the other destination: %+v", got.Destinations[1].Routes)
	}
	wantLog(t, gw, "payment.events", "operator:alice", store.BreakerClosed, store.BreakerOpen, "gateway answers 503 to everything")

	// Close the relay-opened route of the other destination.
	op.post("/api/v1/destinations/ledger/close?route=ledger.events&reason=broker+back").want(t, 200).decode(t, &res)
	if res.From != "OPEN" || res.To != "CLOSED" {
		t.Fatalf("close: %+v", res)
	}
	wantLog(t, ledger, "ledger.events", "operator:alice", store.BreakerOpen, store.BreakerClosed, "broker back")
	got = destinationsAnswer{}
	viewer.get("/api/v1/destinations").want(t, 200).decode(t, &got)
	if r := got.Destinations[1].Routes[0]; r.State != "CLOSED" || r.Opens != 1 || r.Forced || r.OpenSince != nil {
		t.Fatalf("ledger after the close: %+v", r)
	}
	if r := got.Destinations[0].Routes[0]; r.State != "OPEN" {
		t.Fatalf("the close touched the gateway: %+v", r)
	}
}

func ptrString(f *float64) string {
	if f == nil {
		return "null"
	}
	return strconv.FormatFloat(*f, 'f', -1, 64)
}

// wantLog fails unless the newest route log row of route is the change
// named.
func wantLog(t testing.TB, st store.Store, route, actor string, from, to store.BreakerState, reason string) {
	t.Helper()
	log, err := st.RouteLog(context.Background(), route, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 1 || log[0].Actor != actor || log[0].From != from || log[0].To != to || log[0].Reason != reason {
		t.Fatalf("route log of %s: %+v, want %s %s->%s %q", route, log, actor, from, to, reason)
	}
}

// TestDestinationsSingleSink: without Config.Destinations the page shows
// the handler's own store, named after its table.
func TestDestinationsSingleSink(t *testing.T) {
	b := newPostgres(t)
	base := serve(t, admin.Config{Store: b.store})
	b.enqueue(t, payment("tx-1", 1))
	var got destinationsAnswer
	client{t, base, viewerToken}.get("/api/v1/destinations").want(t, 200).decode(t, &got)
	table := b.store.(*postgres.Store).Table()
	if len(got.Destinations) != 1 || got.Destinations[0].Name != table || got.Destinations[0].Table != table || got.Destinations[0].Backlog != 1 {
		t.Fatalf("single sink: %+v", got)
	}
	client{t, base, operatorToken}.post("/api/v1/destinations/"+table+"/open?route=payment.events&reason=maintenance").want(t, 200)
	wantLog(t, b.store, "payment.events", "operator:alice", store.BreakerClosed, store.BreakerOpen, "maintenance")
}

// TestDestinationsConfigRefused: a destination without a name or store,
// or named twice, is refused with what to fix.
func TestDestinationsConfigRefused(t *testing.T) {
	b := newSQLite(t)
	for _, ds := range [][]admin.Destination{
		{{Name: "", Store: b.store}},
		{{Name: "gw", Store: b.store}, {Name: "gw", Store: b.store}},
		{{Name: "gw"}},
	} {
		if _, err := admin.New(admin.Config{Store: b.store, InsecureNoAuth: true, Destinations: ds}); err == nil {
			t.Errorf("%+v: accepted", ds)
		}
	}
}

// TestDestinationsPageForms: a viewer sees the breakers and no form; an
// operator's form needs the CSRF token and a reason, and takes a route
// whose name is a URL.
func TestDestinationsPageForms(t *testing.T) {
	b := newSQLite(t)
	route := "https://gateway.example/approve"
	relayOpens(t, b.store, route, "status 503 Service Unavailable")
	b.enqueue(t, payment("tx-1", 1))
	deliverOne(t, b.store, 40*time.Millisecond)
	base := serve(t, admin.Config{Store: b.store})

	c := browserless(t)
	fetch(t, c, "POST", base+"/login", url.Values{"token": {viewerToken}})
	resp, body := fetch(t, c, "GET", base+"/destinations", nil)
	if resp.StatusCode != 200 || !contains(body, route) || !contains(body, "OPEN") || !contains(body, "status 503 Service Unavailable") ||
		contains(body, `name="reason"`) || !contains(body, `data-refresh="5"`) || !contains(body, `data-figure="p99">40.0 ms<`) {
		t.Fatalf("viewer's page: %d\n%s", resp.StatusCode, body)
	}

	c = browserless(t)
	fetch(t, c, "POST", base+"/login", url.Values{"token": {operatorToken}})
	_, body = fetch(t, c, "GET", base+"/destinations", nil)
	m := csrfRE.FindStringSubmatch(body)
	if m == nil || !contains(body, `name="reason"`) {
		t.Fatalf("operator's page has no form:\n%s", body)
	}
	dest := b.store.(interface{ Table() string }).Table()
	form := url.Values{"route": {route}, "reason": {"gateway fixed"}}
	if resp, _ := fetch(t, c, "POST", base+"/destinations/"+dest+"/close", form); resp.StatusCode != 403 {
		t.Fatalf("post without CSRF: %d, want 403", resp.StatusCode)
	}
	form.Set("csrf_token", m[1])
	form.Set("reason", " ")
	if resp, body := fetch(t, c, "POST", base+"/destinations/"+dest+"/close", form); resp.StatusCode != 400 || !contains(body, "reason is required") {
		t.Fatalf("post without a reason: %d\n%s", resp.StatusCode, body)
	}
	form.Set("reason", "gateway fixed")
	resp, _ = fetch(t, c, "POST", base+"/destinations/"+dest+"/close", form)
	if resp.StatusCode != 303 || !strings.HasPrefix(resp.Header.Get("Location"), "/destinations?done=") {
		t.Fatalf("close: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	wantLog(t, b.store, route, "operator:alice", store.BreakerOpen, store.BreakerClosed, "gateway fixed")
}
