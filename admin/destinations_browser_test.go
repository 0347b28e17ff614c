package admin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/txoutbox/outbox/admin"
	"github.com/txoutbox/outbox/internal/testenv/pgtest"
	"github.com/txoutbox/outbox/store"
)

// pageRefresh is the dashboard's live refresh (layout.html data-refresh).
const pageRefresh = 5 * time.Second

// TestBrowserDestinations drives the Destinations page in headless
// Chromium on PostgreSQL with two destinations, each on a table of its
// own: the page is open and refreshing when a relay opens a breaker of one
// destination, and it shows OPEN within one refresh; the operator then
// closes the breaker from the page with a reason, and the route log names
// the operator and the reason.
func TestBrowserDestinations(t *testing.T) {
	chromiumPath(t)
	shotDir = t.TempDir()
	_, outboxStore := pgtest.Outbox(t, "admbr")
	_, gw := pgtest.Outbox(t, "admbrgw")
	_, ledger := pgtest.Outbox(t, "admbrld")
	base := serve(t, admin.Config{Store: outboxStore, Destinations: []admin.Destination{
		{Name: "gateway", Table: gw.Table(), URL: "https://gw.test/approve", Store: gw},
		{Name: "ledger", Table: ledger.Table(), URL: "kafka://broker:9092?topic=ledger", Store: ledger},
	}})
	const route = "payment.events"
	gwRoutes := `section[data-destination="gateway"] tbody`

	ctx := newBrowser(t)
	login(t, ctx, base, operatorToken)
	// login pauses the live refresh; this test needs it.
	step(t, ctx, "open the Destinations page with the refresh on",
		chromedp.Func(func(ctx context.Context, tgt *chromedp.Target) error {
			_, err := chromedp.Evaluate[any](`localStorage.setItem("outbox-refresh-paused", "0")`)(ctx, tgt)
			return err
		}),
		chromedp.Click(chromedp.CSS(`nav a[href="/destinations"]`)),
		chromedp.WaitVisible(chromedp.CSS(`section[data-destination="ledger"]`)),
	)
	if rows := text(t, ctx, gwRoutes); !strings.Contains(rows, "every route is CLOSED") {
		t.Fatalf("gateway's routes before the outage:\n%s", rows)
	}

	relayOpens(t, gw, route, "http sink: POST https://gw.test/approve: status 503 Service Unavailable")
	opened := time.Now()
	// The first load of the page that began after the breaker opened (its
	// performance.timeOrigin) must show it OPEN: one refresh, no more.
	type load struct {
		Origin float64 `json:"origin"` // ms since the epoch
		Rows   string  `json:"rows"`
		Found  bool    `json:"found"`
	}
	expr := `(function () { var e = document.querySelector(` + "`" + gwRoutes + "`" + `);` +
		` return {origin: performance.timeOrigin, rows: e ? e.innerText : "", found: !!e}; })()`
	var first load
	waitUntil(t, pageRefresh+15*time.Second, "a refresh of the page after the breaker opened", func() bool {
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := chromedp.Run(ectx, chromedp.Evaluate[load](expr))
		if err != nil || !l.Found || l.Origin <= float64(opened.UnixMilli()) {
			return false // not yet reloaded, or in the middle of it
		}
		first = l
		return true
	})
	t.Logf("the first refresh after the breaker opened began %s after it", time.UnixMilli(int64(first.Origin)).Sub(opened).Round(time.Millisecond))
	if !strings.Contains(first.Rows, "OPEN") {
		t.Fatalf("the first refresh after the breaker opened does not show it OPEN:\n%s", first.Rows)
	}
	rows := text(t, ctx, gwRoutes)
	if !strings.Contains(rows, route) || !strings.Contains(rows, "status 503") {
		t.Fatalf("gateway's routes during the outage:\n%s", rows)
	}
	if l := text(t, ctx, `section[data-destination="ledger"] tbody`); strings.Contains(l, "OPEN") {
		t.Fatalf("the ledger shows the gateway's outage:\n%s", l)
	}
	shoot(t, ctx, "destinations") // docs/screenshots/destinations.png

	// Close it from the page: a fresh load with the refresh paused, so that
	// no reload comes between typing the reason and the click.
	row := `section[data-destination="gateway"] tr[data-route="` + route + `"]`
	step(t, ctx, "close the route with a reason",
		chromedp.Func(func(ctx context.Context, tgt *chromedp.Target) error {
			_, err := chromedp.Evaluate[any](`localStorage.setItem("outbox-refresh-paused", "1")`)(ctx, tgt)
			return err
		}),
		chromedp.Navigate(base+"/destinations"),
		chromedp.WaitVisible(chromedp.CSS(row+` input[name="reason"]`)),
		chromedp.SendKeys(chromedp.CSS(row+` input[name="reason"]`), "gateway back after the 503s"),
		chromedp.Click(chromedp.CSS(row+` button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#flash")),
	)
	if f := text(t, ctx, "#flash"); !strings.Contains(f, "closed route "+route+" of destination gateway") {
		t.Fatalf("flash after the close: %q", f)
	}
	if rows := text(t, ctx, gwRoutes); !strings.Contains(rows, "CLOSED") || strings.Contains(rows, "OPEN") {
		t.Fatalf("gateway's routes after the close:\n%s", rows)
	}
	wantLog(t, gw, route, "operator:alice", store.BreakerOpen, store.BreakerClosed, "gateway back after the 503s")
}
