package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/admin"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink/httpsink"
	"github.com/txoutbox/outbox/store"
)

// chromiumPath finds Debian's chromium; the test is skipped without it,
// except in CI (where .ci/run installs it), where it fails.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium is not installed (apt-get install -y chromium)"
	if testenv.InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// newBrowser starts a headless Chromium with a fresh profile; it stops
// when the test ends.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox, // the tests run as root in CI
		chromedp.NoFirstRun,
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1366, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first action starts the browser: give it no deadline.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// step runs actions with a deadline. The deadlines of step, text and
// shoot bound a hang: Chromium on a loaded machine is slow.
func step(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// text returns the innerText of the first element css selects, waiting
// up to a minute for one. One script reads it in the page: chromedp.Text
// finds the node and then reads it, and a page that a navigation replaced
// in between (likely on a loaded machine) fails the read with "No node
// with given id found".
func text(t *testing.T, ctx context.Context, css string) string {
	t.Helper()
	sel, err := json.Marshal(css)
	if err != nil {
		t.Fatal(err)
	}
	expr := `(function () { var e = document.querySelector(` + string(sel) + `);` +
		` return e ? {found: true, text: e.innerText} : {found: false, text: ""}; })()`
	type read struct {
		Found bool   `json:"found"`
		Text  string `json:"text"`
	}
	var got read
	var last error
	waitUntil(t, time.Minute, "an element "+css+" to read", func() bool {
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var err error
		got, err = chromedp.Run(ectx, chromedp.Evaluate[read](expr))
		if err != nil && (last == nil || err.Error() != last.Error()) {
			t.Logf("text of %s: %v (trying again)", css, err)
		}
		last = err
		return err == nil && got.Found
	})
	return got.Text
}

// shoot saves a screenshot of the page into the test's temp dir, and into
// $OUTBOX_SCREENSHOTS_DIR when set (how docs/screenshots is made).
func shoot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dirs := []string{screenshotDir(t)}
	if d := os.Getenv("OUTBOX_SCREENSHOTS_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// shotDir is the screenshots' temp dir of the running browser test.
var shotDir string

func screenshotDir(t *testing.T) string {
	if shotDir == "" {
		t.Fatal("no screenshot dir: set shotDir in the parent test")
	}
	return shotDir
}

// gateway refuses every request (a permanent 422) until accept is set.
type gateway struct {
	accept    atomic.Bool
	delivered atomic.Int64
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.accept.Load() {
		w.WriteHeader(http.StatusUnprocessableEntity)
		return
	}
	g.delivered.Add(1)
	w.WriteHeader(http.StatusOK)
}

// runRelay runs a real relay against st delivering to url until the test
// ends.
func runRelay(t *testing.T, st store.Store, url string) {
	t.Helper()
	sk, err := httpsink.New(httpsink.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(relay.Config{Store: st, Sink: sk, RelayID: "browser-test-relay", PollInterval: 20 * time.Millisecond,
		SweepInterval: 100 * time.Millisecond, NoRetries: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("relay: %v", err)
		}
		_ = sk.Close(context.Background())
	})
}

func login(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	step(t, ctx, "log in",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), token),
		chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#whoami")),
		// No live reload under the test's clicks (the pause button's setting).
		chromedp.Func(func(ctx context.Context, tgt *chromedp.Target) error {
			_, err := chromedp.Evaluate[any](`localStorage.setItem("outbox-refresh-paused", "1")`)(ctx, tgt)
			return err
		}),
	)
}

// TestBrowser drives the dashboard in headless Chromium on PostgreSQL with
// a running relay: a viewer filters, opens an event, reads its timeline
// and is refused an action; an operator retries a FAILED event and sees
// the relay deliver it.
func TestBrowser(t *testing.T) {
	chromiumPath(t)
	shotDir = t.TempDir()
	t.Logf("screenshots in %s", shotDir)
	b := newPostgres(t)
	gw := &gateway{}
	gwSrv := httptest.NewServer(gw)
	t.Cleanup(gwSrv.Close)
	// RelayWithin: the heartbeat below is written once, and a loaded
	// machine may take a while to reach the relays page.
	base := serve(t, admin.Config{Store: b.store, FailedBlocks: true, RelayWithin: time.Hour})
	aq := b.store.AdminQueries()
	defer aq.Close()
	if err := aq.Heartbeat(context.Background(), store.RelayHeartbeat{RelayID: "browser-test-relay", Host: "ci", InFlight: 1}); err != nil {
		t.Fatal(err)
	}
	ids := b.enqueue(t, payment("tx-1001", 1), payment("tx-1002", 1))
	behind := b.enqueue(t, payment("tx-1001", 2), outbox.Event{AggregateType: "merchant", AggregateID: "m-7", EventType: "Onboarded",
		Payload: []byte(`{"merchant":"m-7"}`), TTL: time.Hour})
	runRelay(t, b.store, gwSrv.URL)
	waitUntil(t, 30*time.Second, "the gateway's refusals to make two FAILED events", func() bool {
		n := 0
		for _, id := range ids {
			if statusOf(t, b.store, id) == outbox.StatusFailed {
				n++
			}
		}
		return n == 2
	})

	t.Run("viewer", func(t *testing.T) {
		ctx := newBrowser(t)
		login(t, ctx, base, viewerToken)
		shoot(t, ctx, "overview")
		step(t, ctx, "filter FAILED events",
			chromedp.Navigate(base+"/events"),
			chromedp.WaitVisible(chromedp.CSS("#f-status")),
			chromedp.SetValue(chromedp.CSS("#f-status"), "FAILED"),
			chromedp.SendKeys(chromedp.CSS("#f-aggregate-id"), "tx-1001"),
			chromedp.Click(chromedp.CSS("#apply")),
		)
		waitUntil(t, 30*time.Second, "the filtered list's URL", func() bool {
			loc, err := chromedp.Run(ctx, chromedp.Location())
			return err == nil && strings.Contains(loc, "status=FAILED") && strings.Contains(loc, "aggregate_id=tx-1001")
		})
		step(t, ctx, "the filtered list", chromedp.WaitVisible(chromedp.CSS("a.event-link")))
		rows := text(t, ctx, "#events tbody")
		if !strings.Contains(rows, ids[0].String()) || strings.Contains(rows, ids[1].String()) {
			t.Fatalf("filtered rows:\n%s", rows)
		}
		shoot(t, ctx, "events")
		step(t, ctx, "open the event", chromedp.Click(chromedp.CSS("a.event-link")), chromedp.WaitVisible(chromedp.CSS("#timeline")))
		if got := text(t, ctx, "#event-id"); got != ids[0].String() {
			t.Fatalf("opened %q, want %s", got, ids[0])
		}
		if tl := text(t, ctx, "#timeline"); !strings.Contains(tl, "FAILED") || !strings.Contains(tl, "422") {
			t.Fatalf("timeline:\n%s", tl)
		}
		if p := text(t, ctx, "#payload"); !strings.Contains(p, `"aggregate": "tx-1001"`) {
			t.Fatalf("payload not pretty-printed:\n%s", p)
		}
		shoot(t, ctx, "event")
		step(t, ctx, "try to retry", chromedp.Click(chromedp.CSS("#retry")), chromedp.WaitVisible(chromedp.CSS("#error")))
		if e := text(t, ctx, "#error"); !strings.Contains(e, "needs the operator role") {
			t.Fatalf("refusal: %q", e)
		}
		if s := statusOf(t, b.store, ids[0]); s != outbox.StatusFailed {
			t.Fatalf("a viewer's click changed the event to %s", s)
		}
		for _, page := range []string{"dead-letters", "failure-groups", "blocked", "relays"} {
			step(t, ctx, page, chromedp.Navigate(base+"/"+page), chromedp.WaitVisible(chromedp.CSS("main h1")))
			shoot(t, ctx, page)
		}
		if fg := text(t, ctx, "main"); !strings.Contains(fg, "browser-test-relay") {
			t.Fatalf("relays page:\n%s", fg)
		}
	})

	t.Run("operator", func(t *testing.T) {
		ctx := newBrowser(t)
		login(t, ctx, base, operatorToken)
		gw.accept.Store(true)
		step(t, ctx, "open the FAILED event and ask to retry",
			chromedp.Navigate(base+"/events/"+ids[0].String()),
			chromedp.WaitVisible(chromedp.CSS("#retry")),
			chromedp.Click(chromedp.CSS("#retry")),
			chromedp.WaitVisible(chromedp.CSS("#summary")),
		)
		if s := text(t, ctx, "#summary"); !strings.Contains(s, "would retry 1 event") || !strings.Contains(s, "1 BLOCKED") {
			t.Fatalf("dry run: %q", s)
		}
		if s := statusOf(t, b.store, ids[0]); s != outbox.StatusFailed {
			t.Fatalf("the dry run changed the event to %s", s)
		}
		shoot(t, ctx, "confirm")
		step(t, ctx, "confirm", chromedp.SendKeys(chromedp.CSS("#reason"), "gateway fixed"), chromedp.Click(chromedp.CSS("#confirm")),
			chromedp.WaitVisible(chromedp.CSS("#flash")))
		waitUntil(t, 30*time.Second, "the relay delivers the retried event", func() bool {
			return statusOf(t, b.store, ids[0]) == outbox.StatusProcessed
		})
		step(t, ctx, "reload", chromedp.Navigate(base+"/events/"+ids[0].String()), chromedp.WaitVisible(chromedp.CSS("#status")))
		if s := text(t, ctx, "#status"); s != "PROCESSED" {
			t.Fatalf("the page shows %s", s)
		}
		tl := text(t, ctx, "#timeline")
		if !strings.Contains(tl, "REQUEUED") || !strings.Contains(tl, "by alice") || !strings.Contains(tl, "DELIVERED") {
			t.Fatalf("timeline after the retry:\n%s", tl)
		}
		if gw.delivered.Load() < 2 { // the event and the one it held back
			t.Fatalf("the gateway received %d events, want at least 2", gw.delivered.Load())
		}

		// The aggregate's two delivered events, replayed from the event
		// page: a dry run that counts, then the relay delivers them again.
		waitUntil(t, 30*time.Second, "the relay delivers the event held back", func() bool {
			return statusOf(t, b.store, behind[0]) == outbox.StatusProcessed
		})
		before := gw.delivered.Load()
		step(t, ctx, "ask to replay the aggregate",
			chromedp.Navigate(base+"/events/"+ids[0].String()),
			chromedp.WaitVisible(chromedp.CSS("#replay")),
			chromedp.SendKeys(chromedp.CSS("#replay-reason"), "ledger rebuilt"),
			chromedp.Click(chromedp.CSS("#replay")),
			chromedp.WaitVisible(chromedp.CSS("#summary")),
		)
		if s := text(t, ctx, "#summary"); !strings.Contains(s, "would replay 2 events of 1 aggregate") {
			t.Fatalf("replay dry run: %q", s)
		}
		if s := statusOf(t, b.store, ids[0]); s != outbox.StatusProcessed {
			t.Fatalf("the replay's dry run changed the event to %s", s)
		}
		shoot(t, ctx, "confirm-replay")
		step(t, ctx, "confirm the replay", chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#flash")))
		waitUntil(t, 30*time.Second, "the relay delivers the replayed events", func() bool {
			return gw.delivered.Load() >= before+2 && statusOf(t, b.store, ids[0]) == outbox.StatusProcessed &&
				statusOf(t, b.store, behind[0]) == outbox.StatusProcessed
		})
		step(t, ctx, "reload after the replay", chromedp.Navigate(base+"/events/"+ids[0].String()), chromedp.WaitVisible(chromedp.CSS("#timeline")))
		if tl := text(t, ctx, "#timeline"); !strings.Contains(tl, "REPLAYED") || strings.Count(tl, "DELIVERED") != 2 {
			t.Fatalf("timeline after the replay (want REPLAYED and both deliveries):\n%s", tl)
		}
	})
}
