package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/destconfig"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/store"
)

// Options are the settings of one run (the flags of `outbox demo`).
type Options struct {
	// Short is a short run for CI: a few seconds, the QR lifetime
	// compressed 22x unless TimeScale is given.
	Short bool
	// TimeScale compresses time: the 66s QR lifetime runs as 66s divided
	// by it, 1 to 100 (0: 10; 22 with Short).
	TimeScale float64
	// Rate is the QR confirmations per second (0: 25).
	Rate float64
	// Latency is the mean time the mock gateway takes per request.
	Latency time.Duration
	// FailRate is the share of gateway requests answered 503 at random, 0 to 0.5.
	FailRate float64
	// Outage is how long the gateway is down in incident 1 (0: 2.5s; 0.6s with Short).
	Outage time.Duration
	// Seed seeds the random traffic (0: pick one; it is printed).
	Seed uint64
	// Keep keeps the database afterwards: the temporary SQLite file, or the
	// demo's tables on Env.DB.
	Keep bool
	// JSON also prints the summary as one JSON object on the last line.
	JSON bool
	// Quiet prints no live progress (incidents and the summary are still printed).
	Quiet bool
}

// Backend is an opened outbox database, as the command opens it from a DSN.
type Backend struct {
	// Store is the relay's store on the demo's outbox table.
	Store store.Store
	// Kind names the backend: "postgres", "mysql" or "sqlite".
	Kind string
	// Close closes the store.
	Close func()
}

// Env is what the demo takes from the command that runs it: where to write,
// which database, and the command's own ways to open a store and a sink, so
// that the demo runs on exactly what `outbox relay` runs on.
type Env struct {
	// Stdout receives the narrative, the progress and the summary.
	Stdout io.Writer
	// Logger receives warnings about the cleanup and the relays.
	Logger *slog.Logger
	// DB is the database URL; empty: SQLite in a temporary folder.
	DB string
	// OpenBackend opens the store on table of the database at dsn.
	OpenBackend func(ctx context.Context, dsn, table string) (*Backend, error)
	// OpenSink opens a sink from its URL (relay-1's destinations: an HTTP
	// endpoint, a Kafka broker), logging to log.
	OpenSink func(ctx context.Context, url string, log *slog.Logger) (sink.Sink, error)
	// ShowEvent writes an event's audit trail as `outbox events show` does.
	ShowEvent func(ctx context.Context, w io.Writer, s store.Store, id outbox.EventID) error
	// Redact removes secrets from text the demo prints (log lines, URLs).
	Redact func(string) string
	// RedactURL masks the password and the query of a URL.
	RedactURL func(string) string
}

// ErrGuaranteeBroken is returned (wrapped, with what broke) when the
// summary finds a guarantee broken: a lost, duplicated or out-of-order
// event, or a rolled-back one that escaped.
var ErrGuaranteeBroken = errors.New("demo: a guarantee broke")

// qrLifetime is the QR code lifetime of the payment story: 66 seconds.
const qrLifetime = 66 * time.Second

// demoPlan holds the scenario's timings.
type demoPlan struct {
	scale         float64
	ttl           time.Duration // the compressed QR lifetime
	rate          float64
	warmup        time.Duration
	outage        time.Duration
	pause         time.Duration // between incidents
	restartDown   time.Duration // incident 4: longer than ttl
	maintenance   time.Duration // incident 5: longer than ttl
	edfBacklog    int           // incident 6: receipts queued
	edfApprovals  int           // incident 6: approvals arriving over their deadline
	edfLatency    time.Duration // incident 6: the slow gateway's mean latency
	tail          time.Duration // traffic after the last incident
	poison        int           // payments of the poison merchant
	merchantEvery time.Duration
	holdWait      time.Duration // incident 3: how long to wait for relay-2's request
	kafkaOutage   time.Duration // incident 7: how long Kafka is down
	relay         relayTimings
}

func (c *Options) plan() (demoPlan, error) {
	p := demoPlan{
		scale: 10, rate: 25, warmup: 3 * time.Second, outage: 2500 * time.Millisecond, pause: 1500 * time.Millisecond,
		edfBacklog: 600, edfApprovals: 40, edfLatency: 100 * time.Millisecond,
		tail: time.Second, poison: 3, merchantEvery: time.Second, holdWait: 15 * time.Second, kafkaOutage: 2 * time.Second,
		relay: relayTimings{batch: 100, poll: 100 * time.Millisecond, lease: 10 * time.Second, crashLease: 2 * time.Second,
			backoffMin: 300 * time.Millisecond, backoffMax: 2 * time.Second, sweep: 250 * time.Millisecond,
			stopTimeout: 2 * time.Second, maxRetries: relay.DefaultMaxRetries, httpTimeout: 5 * time.Second, kafkaTimeout: time.Second,
			breaker: relay.BreakerConfig{Window: 2 * time.Second, MinAttempts: 10, FailureRatio: 0.5, FailingFor: time.Second,
				OpenMin: time.Second, OpenMax: 2 * time.Second, Refresh: 200 * time.Millisecond}},
	}
	if c.Short {
		p.scale, p.rate, p.warmup, p.outage, p.pause, p.tail, p.poison, p.merchantEvery =
			22, 25, 800*time.Millisecond, 600*time.Millisecond, 300*time.Millisecond, 500*time.Millisecond, 2, 300*time.Millisecond
		p.edfBacklog, p.edfApprovals, p.kafkaOutage = 300, 20, time.Second
		p.relay.poll, p.relay.crashLease, p.relay.backoffMin, p.relay.backoffMax, p.relay.sweep, p.relay.stopTimeout =
			50*time.Millisecond, time.Second, 100*time.Millisecond, 600*time.Millisecond, 250*time.Millisecond, time.Second
		p.relay.breaker.Window, p.relay.breaker.FailingFor, p.relay.breaker.OpenMin, p.relay.breaker.OpenMax, p.relay.breaker.Refresh =
			time.Second, 500*time.Millisecond, 300*time.Millisecond, 600*time.Millisecond, 100*time.Millisecond
	}
	if c.TimeScale != 0 {
		if c.TimeScale < 1 || c.TimeScale > 100 {
			return p, fmt.Errorf("%w: --time-scale %g: use 1 (real time, a 66s QR code) to 100", outbox.ErrInvalidConfig, c.TimeScale)
		}
		p.scale = c.TimeScale
	}
	if c.Rate != 0 {
		if c.Rate < 1 || c.Rate > 500 {
			return p, fmt.Errorf("%w: --rate %g: use 1 to 500 QR confirmations per second", outbox.ErrInvalidConfig, c.Rate)
		}
		p.rate = c.Rate
	}
	if c.Outage != 0 {
		if c.Outage < 0 {
			return p, fmt.Errorf("%w: --outage %s is negative", outbox.ErrInvalidConfig, c.Outage)
		}
		p.outage = c.Outage
	}
	if c.FailRate < 0 || c.FailRate > 0.5 {
		return p, fmt.Errorf("%w: --fail-rate %g: use 0 to 0.5", outbox.ErrInvalidConfig, c.FailRate)
	}
	if c.Latency < 0 || c.Latency > 5*time.Second {
		return p, fmt.Errorf("%w: --latency %s: use 0 to 5s", outbox.ErrInvalidConfig, c.Latency)
	}
	p.ttl = time.Duration(float64(qrLifetime) / p.scale).Round(time.Millisecond)
	p.restartDown = 2 * p.ttl
	p.maintenance = 2 * p.ttl
	if c.Short {
		p.restartDown = p.ttl * 3 / 2
		p.maintenance = p.ttl * 4 / 3
	}
	return p, nil
}

// demoRun is one run of the demo.
type demoRun struct {
	env  Env
	c    *Options
	plan demoPlan
	seed uint64
	con  *Console

	dsn, table, payments string
	tempDir              string // the SQLite folder we made, if any
	b                    *Backend
	bdb                  *demoDB
	tablesMade           bool
	gw                   *Gateway
	kafka                *Kafka
	confDir              string             // the destinations files
	cfg                  *destconfig.Config // relay-1's destinations file
	cfgText, cfg2File    string             // relay-1's file's text; relay-2's file
	dests                []destTable
	svc                  *paymentService
	stopProgress         func()

	mu sync.Mutex
	r1 *inProcRelay
	r2 *childRelay

	incident atomic.Value // string: what is happening now
	alarms   atomic.Int64

	// Set by the incidents, for the audit trails and the summary.
	crashIDs      []outbox.EventID
	heldID        outbox.EventID
	expiredSample outbox.EventID
	maint         maintenanceResult
	edf           edfResult
	kafkaDown     kafkaOutageResult
	// tooSlow says which incidents this machine was too slow to show at
	// this time scale (see noteTooSlow).
	tooSlow []string
}

// noteTooSlow records, and says, that an incident could not show because
// this machine was too slow for the compressed QR lifetime: the events
// ran out before a relay could send them. The guarantees are still
// checked; the summary repeats the note with a time scale to try.
func (d *demoRun) noteTooSlow(why string) {
	d.tooSlow = append(d.tooSlow, why)
	d.con.Printf("", "   this machine is too slow for a %s QR lifetime: %s", d.plan.ttl, why)
}

// Run runs the demo: sets it up, plays the scenario, checks the guarantees
// and prints the summary. A setting out of range is an error wrapping
// outbox.ErrInvalidConfig; a broken guarantee one wrapping
// ErrGuaranteeBroken.
func Run(ctx context.Context, c Options, env Env) error {
	plan, err := c.plan()
	if err != nil {
		return err
	}
	d := &demoRun{env: env, c: &c, plan: plan, seed: c.Seed}
	if d.seed == 0 {
		d.seed = mrand.Uint64()%1_000_000 + 1
	}
	d.con = NewConsole(env.Stdout, IsTerminal(env.Stdout) && !c.Quiet)
	d.setIncident("starting")
	defer d.cleanup()
	if err := d.setup(ctx); err != nil {
		return err
	}
	if err := d.scenario(ctx); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("demo interrupted")
		}
		return err
	}
	sum, err := d.account(ctx)
	if err != nil {
		return err
	}
	if err := d.report(ctx, sum); err != nil {
		return err
	}
	if p := sum.Problems(); len(p) > 0 {
		return fmt.Errorf("%w: %s", ErrGuaranteeBroken, strings.Join(p, "; "))
	}
	return nil
}

// shownDSN is the database URL as the demo prints it: no password, no secret.
func (d *demoRun) shownDSN() string { return d.env.Redact(d.env.RedactURL(d.dsn)) }

func (d *demoRun) setIncident(s string) { d.incident.Store(s) }
func (d *demoRun) currentIncident() string {
	s, _ := d.incident.Load().(string)
	return s
}

// randomSuffix returns 8 random hex digits for a fresh table name.
func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// setup opens the database, creates the tables, starts the gateway, the
// relays, the service and the progress display.
func (d *demoRun) setup(ctx context.Context) error {
	if d.env.DB == "" {
		dir, err := os.MkdirTemp("", "outbox-demo-")
		if err != nil {
			return fmt.Errorf("make a temporary folder for the demo database: %w", err)
		}
		d.tempDir = dir
		d.dsn = "sqlite://" + filepath.Join(dir, "demo.db")
		d.table, d.payments = "payment_outbox", "payments"
	} else {
		// Fresh tables on a shared database, dropped at the end.
		d.dsn = d.env.DB
		d.table = "demo_" + randomSuffix()
		d.payments = d.table + "_payments"
	}
	if _, err := store.TablesFor(d.table); err != nil {
		return err
	}
	b, err := d.env.OpenBackend(ctx, d.dsn, d.table)
	if err != nil {
		return err
	}
	d.b = b
	if cur, _, err := b.Store.MigrationVersion(ctx); err == nil && cur > 0 && d.tempDir == "" {
		return fmt.Errorf("table %s already exists: run the demo again (it picks a random name)", d.table)
	}
	if _, err := b.Store.MigrateUp(ctx); err != nil {
		return fmt.Errorf("create the outbox tables: %w", err)
	}
	d.tablesMade = true
	if d.bdb, err = openDemoDB(b); err != nil {
		return err
	}
	if err := d.bdb.createPayments(ctx, d.payments); err != nil {
		return err
	}
	d.gw, err = StartGateway(GatewayConfig{
		Latency: d.c.Latency, FailRate: d.c.FailRate, PoisonMerchant: poisonMerchant, Seed: d.seed,
	})
	if err != nil {
		return err
	}
	if err := d.setupFanOut(ctx); err != nil {
		return err
	}
	d.printHeader()
	if err := d.startRelays(ctx); err != nil {
		return err
	}
	d.con.Printf("relays", "relay-1 runs in this process; relay-2 is a separate `outbox relay --config` process (pid %d, --lease %s);",
		d.currentR2().pid(), d.plan.relay.crashLease)
	d.con.Printf("", "   each runs the router (outbox table -> the destination tables) and one relay per destination table")
	d.svc = &paymentService{
		db: d.bdb, payments: d.payments, ttl: d.plan.ttl, rate: d.plan.rate, merchantEvery: d.plan.merchantEvery,
		nudge: d.nudge, log: d.con.Printf, rnd: mrand.New(mrand.NewPCG(d.seed, d.seed+1)),
	}
	d.svc.start(ctx)
	d.con.Printf("service", "started: %g QR confirmations/s; ~10%% break the merchant's limit and roll back; ~15%% are cancelled by the customer later", d.plan.rate)
	d.stopProgress = d.startProgress(ctx)
	return nil
}

func (d *demoRun) printHeader() {
	p := d.plan
	var b strings.Builder
	fmt.Fprintf(&b, "outbox demo: the QR-payment story of the transactional outbox, end to end (docs/ARCHITECTURE.md, the payment story)\n\n")
	if d.tempDir != "" {
		fmt.Fprintf(&b, "  database  SQLite in a temporary folder: %s\n", filepath.Join(d.tempDir, "demo.db"))
	} else {
		fmt.Fprintf(&b, "  database  %s (%s)\n", d.shownDSN(), d.b.Kind)
	}
	fmt.Fprintf(&b, "            outbox table %s, business table %s: same database, same transactions\n", d.table, d.payments)
	fmt.Fprintf(&b, "  gateway   mock payment gateway at %s%s: latency ~%s, %g%% random 503s;\n", d.gw.URL(), GatewayPath, d.c.Latency, d.c.FailRate*100)
	fmt.Fprintf(&b, "            merchant %s is invalid (400); Idempotency-Key checked; order checked per aggregate\n", poisonMerchant)
	b.WriteString(d.destinationsHeader())
	fmt.Fprintf(&b, "  time      the QR code lives 66s; this run is compressed %gx (--time-scale %g): every QR code lives %s\n", p.scale, p.scale, p.ttl)
	fmt.Fprintf(&b, "  service   each QR confirmation is ONE transaction: INSERT INTO %s + Enqueue ApprovalRequested (TTL %s)\n", d.payments, p.ttl)
	fmt.Fprintf(&b, "  relays    per table: batch %d, max %d retries, backoff %s..%s with jitter, failed events block their aggregate\n",
		p.relay.batch, p.relay.maxRetries, p.relay.backoffMin, p.relay.backoffMax)
	fmt.Fprintf(&b, "  seed      %d (--seed %d replays the same traffic)\n\n", d.seed, d.seed)
	_, _ = d.con.Write([]byte(b.String()))
}

// cleanup stops whatever still runs and removes the demo's data unless
// --keep. It prints nothing on stdout (the JSON summary stays last).
func (d *demoRun) cleanup() {
	if d.stopProgress != nil {
		d.stopProgress()
	}
	if d.svc != nil && d.svc.stop != nil {
		select {
		case <-d.svc.stop:
		default:
			d.svc.stopService()
		}
	}
	d.stopRelays()
	if d.gw != nil {
		_ = d.gw.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d.cleanupFanOut(ctx, d.tablesMade && !d.c.Keep && d.tempDir == "")
	if d.tablesMade && !d.c.Keep && d.tempDir == "" {
		if d.bdb != nil {
			if err := d.bdb.dropTable(ctx, d.payments); err != nil {
				d.env.Logger.Warn("drop the demo's business table", "table", d.payments, "err", err)
			}
		}
		if err := d.b.Store.MigrateDown(ctx); err != nil {
			d.env.Logger.Warn("drop the demo's outbox tables", "table", d.table, "err", err)
		}
		if t, err := store.TablesFor(d.table); err == nil && d.bdb != nil {
			if err := d.bdb.dropTable(ctx, t.Migrations); err != nil {
				d.env.Logger.Warn("drop the demo's migration table", "table", t.Migrations, "err", err)
			}
		}
	}
	if d.bdb != nil {
		d.bdb.close()
	}
	if d.b != nil {
		d.b.Close()
	}
	if d.tempDir != "" && !d.c.Keep {
		if err := os.RemoveAll(d.tempDir); err != nil {
			d.env.Logger.Warn("remove the demo's temporary folder", "dir", d.tempDir, "err", err)
		}
	}
}

// sleep waits for dur or until ctx ends.
func sleep(ctx context.Context, dur time.Duration) error {
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// startProgress shows counts by status, the delivery rate, the oldest
// pending age and the current incident: redrawn four times a second on a
// terminal, one plain line a second otherwise. --quiet turns it off.
func (d *demoRun) startProgress(ctx context.Context) func() {
	if d.c.Quiet {
		return func() {}
	}
	every := time.Second
	if d.con.Live() {
		every = 250 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		type sample struct {
			at        time.Time
			processed int64
		}
		var window []sample
		for {
			var now time.Time
			select {
			case <-ctx.Done():
				return
			case now = <-t.C:
			}
			st, err := d.gwStore().Stats(ctx, true)
			var kst store.Stats
			if err == nil {
				kst, err = d.kStore().Stats(ctx, true)
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				d.con.Status("stats failed: " + err.Error())
				continue
			}
			n := st.Counts
			window = append(window, sample{now, n[outbox.StatusProcessed]})
			for len(window) > 1 && now.Sub(window[0].at) > 2*time.Second {
				window = window[1:]
			}
			rate := 0.0
			if first := window[0]; len(window) > 1 {
				rate = float64(n[outbox.StatusProcessed]-first.processed) / now.Sub(first.at).Seconds()
			}
			gw, kafka := "up", "up"
			if d.gw.IsDown() {
				gw = "DOWN"
			}
			if d.kafka.IsDown() {
				kafka = "DOWN"
			}
			_, committed, rolledBack := d.svc.counts()
			d.con.Status(
				fmt.Sprintf("gateway table: PENDING %d  PROCESSING %d  PROCESSED %d  FAILED %d  EXPIRED %d  BLOCKED %d",
					n[outbox.StatusPending], n[outbox.StatusProcessing], n[outbox.StatusProcessed],
					n[outbox.StatusFailed], n[outbox.StatusExpired], n[outbox.StatusBlocked]),
				fmt.Sprintf("%.0f delivered/s  oldest pending %s  gateway %s  |  kafka table: PENDING %d  PROCESSED %d  kafka %s  |  committed %d  rolled back %d",
					rate, st.OldestPendingAge.Round(100*time.Millisecond), gw,
					kst.Counts[outbox.StatusPending]+kst.Counts[outbox.StatusProcessing], kst.Counts[outbox.StatusProcessed], kafka, committed, rolledBack),
				"now: "+d.currentIncident(),
			)
		}
	}()
	return func() {
		cancel()
		<-done
		d.con.ClearStatus()
	}
}
