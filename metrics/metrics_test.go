package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/metrics"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/relay/relaytest"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/store"
)

// series returns the samples of name that have the label pairs given.
func series(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) []*dto.Metric {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	var out []*dto.Metric
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, want) {
				out = append(out, m)
			}
		}
	}
	return out
}

// value is a counter's or gauge's value, or a histogram's sample count.
func value(m *dto.Metric) float64 {
	return m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
}

// sample is the value of the first series name{labels}; ok is false when
// there is none.
func sample(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) (v float64, ok bool) {
	t.Helper()
	ms := series(t, reg, name, labels...)
	if len(ms) == 0 {
		return 0, false
	}
	return value(ms[0]), true
}

// sum adds up the series of name matching labels, over every other label.
func sum(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	total := 0.0
	for _, m := range series(t, reg, name, labels...) {
		total += value(m)
	}
	return total
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

func mustSample(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	v, ok := sample(t, reg, name, labels...)
	if !ok {
		t.Fatalf("series %s%v is missing", name, labels)
	}
	return v
}

// waitFor polls cond every 10ms until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

func event(agg string, n int) outbox.Event {
	return outbox.Event{AggregateType: "payment", AggregateID: agg, EventType: "ApprovalRequested",
		Payload: []byte(fmt.Sprintf(`{"secret_card_number":"4111-%d"}`, n))}
}

// drainWithFailures enqueues 5 events that are delivered, one that fails
// once and is then delivered, one poison event with a follower (FAILED, a
// blocked aggregate), one already past its deadline and one with a
// deadline an hour away, and drains them through a relay observed by m.
func drainWithFailures(t *testing.T, b *backend, m relay.Observer, log *slog.Logger, logs *testenv.Buffer) {
	t.Helper()
	var events []outbox.Event
	for i := range 5 {
		events = append(events, event(fmt.Sprintf("ok-%d", i), i))
	}
	late := event("late", 0)
	late.ExpiresAt = time.Now().Add(-time.Second)
	soon := event("ttl", 0)
	soon.TTL = time.Hour
	events = append(events, event("flaky", 0), event("poison", 0), event("poison", 1), late, soon)
	b.enqueue(t, events...)

	var mu sync.Mutex
	flakyFailed := false
	rec := &relaytest.Recorder{Fail: func(m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case m.AggregateID == "poison":
			return outbox.Permanent(errors.New("gateway said 400: unknown merchant"))
		case m.AggregateID == "flaky" && !flakyFailed:
			flakyFailed = true
			return errors.New("gateway said 503")
		}
		return nil
	}}
	r, err := relay.New(relay.Config{Store: b.store, Sink: rec, Observer: m, Logger: log,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond, PollInterval: 10 * time.Millisecond,
		SweepInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Ten events take well under a second; the deadline bounds a hang,
	// with room for SQLite under -race on a machine busy with other work.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatalf("drain: %v; the relay's log:\n%s", err, logs.String())
	}
}

// TestCountersAfterADrainWithFailures checks every counter and histogram
// against a known drain, on each database.
func TestCountersAfterADrainWithFailures(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := openBackend(t, kind)
			reg := prometheus.NewRegistry()
			var logs testenv.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			m, err := metrics.New(metrics.Config{Registerer: reg, RelayID: "relay-a", Version: "v-test", Store: b.store,
				GaugeInterval: 20 * time.Millisecond, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			drainWithFailures(t, b, m, log, &logs)

			route := sink.DefaultDestination
			want := map[store.OutcomeKind]float64{
				store.Delivered: 7, // 5 + flaky + ttl
				store.Retry:     1,
				store.Failed:    1,
				store.Expired:   1,
				store.Fenced:    0,
			}
			// The late event is expired either by the relay's batch (route
			// default) or, if the sweeper saw it first, by the sweeper
			// (route "sweeper"): count it over the routes. A claim does not
			// write the event row, so the sweeper can expire the late event
			// while a claim of the relay that it did not see yet holds it;
			// the relay's EXPIRED for it is then fenced, and counted as a
			// lease lost.
			bySweeper, _ := sample(t, reg, "outbox_deliveries_total", "route", "sweeper", "outcome", store.Expired.Label())
			for outcome, n := range want {
				got := sum(t, reg, "outbox_deliveries_total", "outcome", outcome.Label())
				if outcome == store.Fenced && got <= bySweeper {
					continue
				}
				if got != n {
					t.Errorf("outbox_deliveries_total{outcome=%q} = %v, want %v (expired by the sweeper: %v)", outcome, got, n, bySweeper)
				}
			}
			// The poison's follower is given back unsent (released) each time
			// it is claimed behind the FAILED event: at least once.
			if got := mustSample(t, reg, "outbox_deliveries_total", "route", route, "outcome", "released"); got < 1 {
				t.Errorf("released = %v, want at least 1", got)
			}
			if got := mustSample(t, reg, "outbox_delivery_lag_seconds", "route", route); got != 7 {
				t.Errorf("delivery lag samples = %v, want one per delivery (7)", got)
			}
			if got := sum(t, reg, "outbox_deadline_margin_seconds"); got != 2 {
				t.Errorf("deadline margin samples = %v, want 2 (the TTL event delivered, the late one expired)", got)
			}
			if got := mustSample(t, reg, "outbox_publish_duration_seconds", "route", route); got < 1 {
				t.Errorf("publish duration samples = %v", got)
			}
			for _, name := range []string{"outbox_claim_duration_seconds", "outbox_complete_duration_seconds"} {
				if got := mustSample(t, reg, name); got < 1 {
					t.Errorf("%s samples = %v", name, got)
				}
			}
			if got := mustSample(t, reg, "outbox_lease_lost_total"); got > bySweeper {
				t.Errorf("lease lost = %v, want 0 (or 1 when the sweeper expired the late event under the relay's claim)", got)
			}
			for _, op := range []string{"claim", "complete", "sweep", "purge", "count", "snapshot"} {
				if got := mustSample(t, reg, "outbox_store_errors_total", "op", op); got != 0 {
					t.Errorf("store errors{op=%s} = %v", op, got)
				}
			}
			if got := mustSample(t, reg, "outbox_relay_info", "relay_id", "relay-a", "version", "v-test"); got != 1 {
				t.Errorf("relay info = %v", got)
			}
			checkMargins(t, reg)
			// The relay gave its lanes up when it stopped; the relay id
			// balancing again, alone on the outbox, holds all 64.
			if got := mustSample(t, reg, "outbox_relay_lanes"); got != 0 {
				t.Errorf("lanes after the relay stopped = %v, want 0", got)
			}
			if err := b.store.BalanceLanes(context.Background(), "relay-a", time.Minute); err != nil {
				t.Fatal(err)
			}
			if got := mustSample(t, reg, "outbox_relay_lanes"); got != 64 {
				t.Errorf("lanes of the only relay = %v, want 64", got)
			}

			// The gauges, from one snapshot.
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); m.RunGauges(ctx) }()
			defer func() { cancel(); <-done }()
			waitFor(t, 10*time.Second, "the gauges", func() bool {
				v, ok := sample(t, reg, "outbox_events", "status", "PROCESSED")
				return ok && v == 7
			})
			gauges := map[string]float64{
				"outbox_dead_letters": 1, "outbox_blocked_aggregates": 1, "outbox_gauges_leader": 1,
				"outbox_oldest_due_pending_age_seconds": 0,
			}
			for name, n := range gauges {
				if got := mustSample(t, reg, name); got != n {
					t.Errorf("%s = %v, want %v", name, got, n)
				}
			}
			for status, n := range map[string]float64{"FAILED": 1, "BLOCKED": 1, "EXPIRED": 1, "PENDING": 0, "PROCESSING": 0, "SKIPPED": 0} {
				if got := mustSample(t, reg, "outbox_events", "status", status); got != n {
					t.Errorf("outbox_events{status=%s} = %v, want %v", status, got, n)
				}
			}
			if strings.Contains(logs.String(), "4111-") {
				t.Errorf("a payload reached the logs:\n%s", logs.String())
			}
		})
	}
}

// checkMargins: the TTL event was delivered with about an hour to spare
// (above the 300 s bucket), the late one with none (at most 0).
func checkMargins(t *testing.T, reg prometheus.Gatherer) {
	t.Helper()
	fams, _ := reg.Gather()
	for _, f := range fams {
		if f.GetName() != "outbox_deadline_margin_seconds" {
			continue
		}
		cumulative := map[float64]uint64{}
		for _, m := range f.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				cumulative[b.GetUpperBound()] += b.GetCumulativeCount()
			}
		}
		for ub, count := range cumulative {
			want := uint64(0)
			switch {
			case ub >= 0 && ub < 3600:
				want = 1
			case ub >= 3600:
				want = 2
			}
			if ub < 0 {
				continue // the late event's margin is 0 or a little below: not asserted
			}
			if count != want {
				t.Errorf("margin bucket le=%v holds %d, want %d", ub, count, want)
			}
		}
	}
}

// failingStore fails its first claims, as a database that is down would.
type failingStore struct {
	store.Store
	mu    sync.Mutex
	fails int
}

func (f *failingStore) Claim(ctx context.Context, req store.ClaimRequest) (*store.Claim, error) {
	f.mu.Lock()
	fail := f.fails > 0
	if fail {
		f.fails--
	}
	f.mu.Unlock()
	if fail {
		return nil, errors.New("connection refused")
	}
	return f.Store.Claim(ctx, req)
}

func TestStoreErrorsAreCounted(t *testing.T) {
	t.Parallel()
	b := openBackend(t, "sqlite")
	reg := prometheus.NewRegistry()
	m, err := metrics.New(metrics.Config{Registerer: reg, RelayID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	b.enqueue(t, event("a", 0))
	st := &failingStore{Store: b.store, fails: 2}
	r, err := relay.New(relay.Config{Store: st, Sink: &relaytest.Recorder{}, Observer: m, PollInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if got := mustSample(t, reg, "outbox_store_errors_total", "op", "claim"); got != 2 {
		t.Errorf("store errors{op=claim} = %v, want 2", got)
	}
	if got := mustSample(t, reg, "outbox_deliveries_total", "route", "default", "outcome", "delivered"); got != 1 {
		t.Errorf("delivered = %v, want 1", got)
	}
}

// gateSink holds every Publish until open is closed, then delivers.
type gateSink struct {
	entered chan struct{}
	open    chan struct{}
	once    sync.Once
}

func (g *gateSink) Publish(_ context.Context, msgs []outbox.Message) []error {
	g.once.Do(func() { close(g.entered) })
	<-g.open
	return make([]error, len(msgs))
}
func (g *gateSink) Close(context.Context) error { return nil }

// TestLeaseLossIsCountedAsFenced: a relay whose batch outlives its lease
// is fenced when it records, and says so in both counters.
func TestLeaseLossIsCountedAsFenced(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := openBackend(t, kind)
			reg := prometheus.NewRegistry()
			m, err := metrics.New(metrics.Config{Registerer: reg, RelayID: "r"})
			if err != nil {
				t.Fatal(err)
			}
			b.enqueue(t, event("slow", 0))
			g := &gateSink{entered: make(chan struct{}), open: make(chan struct{})}
			// The lease is long enough for a claim on a loaded machine: the
			// relay gives a claim half the lease, and a claim that ran out
			// of it may have committed unseen, its row then waiting for a
			// reaper (this relay's own never runs here).
			r, err := relay.New(relay.Config{Store: b.store, Sink: g, Observer: m, Lease: 4 * time.Second,
				SweepInterval: time.Hour, PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			// The reaper is another process's sweep. While the relay has not
			// reached the sink yet, it returns what such a claim stranded.
			other := b.another(t)
			waitFor(t, 3*time.Minute, "the relay to hand the batch to the sink", func() bool {
				select {
				case <-g.entered:
					return true
				default:
					_, _ = other.Sweep(context.Background(), store.SweepRequest{RelayID: "reaper"})
					return false
				}
			})
			// The lease ends while the sink holds the batch: the reaper
			// takes the row back.
			waitFor(t, 2*time.Minute, "the reaper to take the batch back", func() bool {
				res, err := other.Sweep(context.Background(), store.SweepRequest{RelayID: "reaper"})
				return err == nil && res.Reaped > 0
			})
			close(g.open)
			waitFor(t, 2*time.Minute, "the fenced outcome", func() bool {
				v, _ := sample(t, reg, "outbox_deliveries_total", "route", "default", "outcome", "fenced")
				return v >= 1
			})
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			// On a loaded machine the redelivery can outlast the lease
			// too, and lose it again: every loss is one fenced
			// outcome, however many there were.
			fenced, _ := sample(t, reg, "outbox_deliveries_total", "route", "default", "outcome", "fenced")
			if got := mustSample(t, reg, "outbox_lease_lost_total"); got < 1 || got != fenced {
				t.Errorf("lease lost = %v, want at least 1 and as many as the fenced outcomes (%v)", got, fenced)
			}
		})
	}
}

// routedSink names each message's route after its aggregate id.
type routedSink struct{ relaytest.Recorder }

func (*routedSink) Destination(m *outbox.Message) string { return "route-" + m.AggregateID }

func TestRouteLabelIsBounded(t *testing.T) {
	t.Parallel()
	b := openBackend(t, "sqlite")
	reg := prometheus.NewRegistry()
	m, err := metrics.New(metrics.Config{Registerer: reg, MaxRoutes: 2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	b.enqueue(t, event("a", 0), event("b", 0), event("c", 0), event("d", 0))
	r, err := relay.New(relay.Config{Store: b.store, Sink: &routedSink{}, Observer: m, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	fams, _ := reg.Gather()
	routes := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "outbox_deliveries_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["outcome"] == "delivered" {
				routes[labels["route"]] += s.GetCounter().GetValue()
			}
		}
	}
	if len(routes) != 3 || routes["other"] != 2 {
		t.Fatalf("delivered by route = %v; want two routes of their own and \"other\" with 2", routes)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  metrics.Config
		want string
	}{
		{metrics.Config{}, "Registerer is required"},
		{metrics.Config{Registerer: prometheus.NewRegistry(), GaugeInterval: time.Millisecond}, "gauge interval"},
		{metrics.Config{Registerer: prometheus.NewRegistry(), MaxRoutes: -1}, "max routes"},
	} {
		_, err := metrics.New(tc.cfg)
		if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig mentioning %q", tc.cfg, err, tc.want)
		}
	}
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(metrics.Config{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(metrics.Config{Registerer: reg}); err == nil || !strings.Contains(err.Error(), "register") {
		t.Errorf("registering twice on one registry: %v, want a registration error", err)
	}
}
