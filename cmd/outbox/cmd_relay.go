package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/store"
)

// RelayCmd runs the relay.
type RelayCmd struct {
	Check         bool          `help:"With --config FILE: check the destinations file, print its plan and its destination tables and exit (0 if valid, 1 otherwise); no database or sink is opened."`
	Sink          string        `help:"Where to deliver: http(s)://host/path, kafka://, nats://, amqp://, redis://, stdout:// or discard://." env:"OUTBOX_SINK" placeholder:"URL"`
	Route         []string      `help:"Per-aggregate-type destination for broker sinks, e.g. merchant=merchant.audit (repeatable; default {aggregate_type}.events)." env:"OUTBOX_ROUTE" placeholder:"TYPE=DEST"`
	RouteLimit    []string      `help:"Limits of one route, replacing the sink URL's rate=, burst=, max_in_flight= for it, e.g. payment.events=rate=100/s,burst=20,max_in_flight=8 (repeatable; 0 lifts a limit)." env:"OUTBOX_ROUTE_LIMIT" placeholder:"ROUTE=LIMITS"`
	Batch         int           `help:"Most events claimed at once." default:"500" env:"OUTBOX_BATCH"`
	PollInterval  time.Duration `help:"Wait between claims when nothing is due." default:"1s" env:"OUTBOX_POLL_INTERVAL"`
	Linger        time.Duration `help:"Least wait after a claim that took less than a full batch, to gather a trickle into batches (negative: none)." default:"5ms" env:"OUTBOX_LINGER"`
	Lease         time.Duration `help:"How long a claim is exclusive; must exceed publish plus mark time by far." default:"2m" env:"OUTBOX_LEASE"`
	MaxRetries    int           `help:"Failed attempts retried before an event ends FAILED (0: fail at once)." default:"5" env:"OUTBOX_MAX_RETRIES"`
	BackoffMin    time.Duration `help:"First retry delay (exponential, with jitter)." default:"1s" env:"OUTBOX_BACKOFF_MIN"`
	BackoffMax    time.Duration `help:"Largest retry delay." default:"5m" env:"OUTBOX_BACKOFF_MAX"`
	SweepInterval time.Duration `help:"How often the reaper returns ended leases and expires waiting events." default:"5s" env:"OUTBOX_SWEEP_INTERVAL"`
	Retention     time.Duration `help:"Move finished events (PROCESSED, EXPIRED, SKIPPED) into the history this long after they finished (0 leaves them in the hot table); an event id can be enqueued again once its event moved. On an adopted table only the events that finished after the adoption." default:"168h" env:"OUTBOX_RETENTION"`
	PurgeAdopted  bool          `name:"purge-adopted" help:"On an adopted table, let --retention move the rows that had finished before the adoption into the history too (the team's history)." env:"OUTBOX_PURGE_ADOPTED"`
	HistoryKeep   int           `name:"history-keep-days" help:"Drop the months of history that ended more than this many days ago, whole (0 keeps the history forever)." default:"0" env:"OUTBOX_HISTORY_KEEP_DAYS"`
	OnFailure     string        `help:"What a FAILED event does to later events of its aggregate: block (until an operator acts) or continue." default:"block" enum:"block,continue" env:"OUTBOX_ON_FAILURE"`
	StrictFIFO    bool          `name:"strict-fifo" help:"Turn earliest-deadline-first off: claim strictly the oldest due events, whatever their deadlines." env:"OUTBOX_STRICT_FIFO"`
	FIFOShare     float64       `name:"fifo-share" help:"Part of each claim (above 0, at most 1) that goes to the oldest due events in id order; the rest goes to the aggregates holding the nearest deadlines." default:"0.5" env:"OUTBOX_FIFO_SHARE"`
	InFlight      int           `help:"Batches on their way at once: the next is claimed while one is published and one recorded (1 turns this off)." default:"2" env:"OUTBOX_IN_FLIGHT"`
	StopTimeout   time.Duration `help:"On SIGINT/SIGTERM, how long to keep publishing the batch in flight before releasing the rest." default:"10s" env:"OUTBOX_STOP_TIMEOUT"`
	RelayID       string        `help:"Name of this relay in the audit trail (default: host-pid-random)." env:"OUTBOX_RELAY_ID"`
	Drain         bool          `help:"Exit 0 once no event can move without an operator." env:"OUTBOX_DRAIN"`
	StartWait     time.Duration `help:"How long to wait at start for a database or broker that cannot be reached, then exit 1 (0: as long as it takes)." default:"0" env:"OUTBOX_START_WAIT"`
	Progress      time.Duration `help:"How often to log progress (0: never)." default:"5s" env:"OUTBOX_PROGRESS"`
	Admin         string        `help:"Serve /metrics, /healthz and /readyz on this address, e.g. 127.0.0.1:9464 (off when empty); these have no authentication. With --admin-tokens-file, OUTBOX_ADMIN_TOKENS or --admin-insecure-no-auth also the admin API and dashboard." env:"OUTBOX_ADMIN" placeholder:"ADDR"`
	GaugeInterval time.Duration `help:"With --admin: how often the cluster-wide gauges are refreshed (by one relay at a time)." default:"15s" env:"OUTBOX_GAUGE_INTERVAL"`
	Source        string        `help:"How the relay finds new events: poll (the claim statement, every --poll-interval and on wake-ups) logical (PostgreSQL logical replication) or binlog (the MySQL or MariaDB binary log); see docs/CDC.md." default:"poll" enum:"poll,logical,binlog" env:"OUTBOX_SOURCE"`
	cdcFlags
	BinlogServerID uint32        `name:"binlog-server-id" help:"With --source binlog: the replica server id the relay reads the binary log under; unique among the server's replicas (0: a random one)." default:"0" env:"OUTBOX_BINLOG_SERVER_ID"`
	SafetyPoll     time.Duration `help:"With --source logical or binlog: how often the ordinary claim runs as the safety net (retries, events held behind an earlier one)." default:"5s" env:"OUTBOX_SAFETY_POLL"`
	StreamLease    time.Duration `help:"With --source logical or binlog: the stream lease; a standby relay takes over within about this long after the streaming one dies." default:"15s" env:"OUTBOX_STREAM_LEASE"`

	extraCollectors  []prometheus.Collector
	AuditAnchorKey   string        `name:"audit-anchor-key" help:"Sign the audit chain's head with this Ed25519 key file (outbox audit keygen) every --audit-anchor-every and when the relay stops; each anchor goes to the audit log and to this relay's log (keep the log outside the database: outbox audit verify --anchors-file reads it)." env:"OUTBOX_AUDIT_ANCHOR_KEY" placeholder:"FILE"`
	AuditAnchorEvery time.Duration `name:"audit-anchor-every" help:"With --audit-anchor-key: how often to anchor (at least 1m)." default:"1h" env:"OUTBOX_AUDIT_ANCHOR_EVERY"`
	Heartbeat        time.Duration `help:"How often the relay writes its heartbeat row, which the admin API lists (0: never)." default:"5s" env:"OUTBOX_HEARTBEAT"`
	AdminAuth        `prefix:"admin-" envprefix:"OUTBOX_RELAY_ADMIN_"`

	BreakerOff         bool          `help:"Turn the per-route circuit breaker off: every destination fault then costs a retry." env:"OUTBOX_BREAKER_OFF"`
	BreakerWindow      time.Duration `help:"Circuit breaker: the window over which the rate of destination faults is measured." default:"30s" env:"OUTBOX_BREAKER_WINDOW"`
	BreakerMinAttempts int           `help:"Circuit breaker: least attempts within the window before the rate counts." default:"20" env:"OUTBOX_BREAKER_MIN_ATTEMPTS"`
	BreakerRatio       float64       `help:"Circuit breaker: share of faulty attempts within the window that opens it (0 to 1)." default:"0.5" env:"OUTBOX_BREAKER_RATIO"`
	BreakerFailingFor  time.Duration `help:"Circuit breaker: opens when no attempt succeeded for this long while at least 3 met a destination fault, more on a route already failing often (100ms to 1h)." default:"2s" env:"OUTBOX_BREAKER_FAILING_FOR"`
	BreakerOpenMin     time.Duration `help:"Circuit breaker: wait after opening before the first probe (after a failed probe, the wait is as long as the outage so far, up to --breaker-open-max)." default:"5s" env:"OUTBOX_BREAKER_OPEN_MIN"`
	BreakerOpenMax     time.Duration `help:"Circuit breaker: longest wait between two probes." default:"30s" env:"OUTBOX_BREAKER_OPEN_MAX"`
	BreakerRefresh     time.Duration `help:"Circuit breaker: how often this relay reads the shared breaker state." default:"1s" env:"OUTBOX_BREAKER_REFRESH"`
}

// breakerConfig is the relay's circuit breaker from the flags.
func (c *RelayCmd) breakerConfig() (relay.BreakerConfig, error) {
	if c.BreakerRatio <= 0 || c.BreakerRatio > 1 {
		return relay.BreakerConfig{}, fmt.Errorf("%w: --breaker-ratio must be more than 0 and at most 1, got %g", outbox.ErrInvalidConfig, c.BreakerRatio)
	}
	if c.BreakerMinAttempts < 1 {
		return relay.BreakerConfig{}, fmt.Errorf("%w: --breaker-min-attempts must be at least 1, got %d", outbox.ErrInvalidConfig, c.BreakerMinAttempts)
	}
	if c.BreakerFailingFor < 100*time.Millisecond || c.BreakerFailingFor > time.Hour {
		return relay.BreakerConfig{}, fmt.Errorf("%w: --breaker-failing-for must be 100ms to 1h, got %s", outbox.ErrInvalidConfig, c.BreakerFailingFor)
	}
	if v, set := os.LookupEnv("OUTBOX_BREAKER_CONSECUTIVE"); set {
		return relay.BreakerConfig{}, fmt.Errorf("%w: OUTBOX_BREAKER_CONSECUTIVE=%s is no longer read: the breaker no longer counts faults in a row "+
			"(attempts sent together are not a row); unset it, and use OUTBOX_BREAKER_FAILING_FOR (--breaker-failing-for) and OUTBOX_BREAKER_MIN_ATTEMPTS instead",
			outbox.ErrInvalidConfig, v)
	}
	return relay.BreakerConfig{Disabled: c.BreakerOff, Window: c.BreakerWindow, MinAttempts: c.BreakerMinAttempts,
		FailureRatio: c.BreakerRatio, FailingFor: c.BreakerFailingFor, OpenMin: c.BreakerOpenMin,
		OpenMax: c.BreakerOpenMax, Refresh: c.BreakerRefresh}, nil
}

// relayBase checks the flags every relay of the command shares and
// returns the relay configuration they make, without a store, a sink or
// an observer.
func (c *RelayCmd) relayBase(g *Globals) (relay.Config, error) {
	policy, err := relay.ParseFailurePolicy(c.OnFailure)
	if err != nil {
		return relay.Config{}, err
	}
	if c.MaxRetries < 0 {
		return relay.Config{}, fmt.Errorf("%w: --max-retries must be 0 or more, got %d", outbox.ErrInvalidConfig, c.MaxRetries)
	}
	if !(c.FIFOShare > 0 && c.FIFOShare <= 1) {
		return relay.Config{}, fmt.Errorf("%w: --fifo-share must be above 0 and at most 1 (e.g. 0.5: half of each claim in id order), got %v", outbox.ErrInvalidConfig, c.FIFOShare)
	}
	breaker, err := c.breakerConfig()
	if err != nil {
		return relay.Config{}, err
	}
	ring, err := g.keyring()
	if err != nil {
		return relay.Config{}, err
	}
	return relay.Config{
		Encryption:      ring,
		BatchSize:       c.Batch,
		StrictFIFO:      c.StrictFIFO,
		FIFOShare:       c.FIFOShare,
		PollInterval:    c.PollInterval,
		Linger:          c.Linger,
		Lease:           c.Lease,
		MaxRetries:      c.MaxRetries,
		NoRetries:       c.MaxRetries == 0,
		BackoffMin:      c.BackoffMin,
		BackoffMax:      c.BackoffMax,
		SweepInterval:   c.SweepInterval,
		Retention:       c.Retention,
		PurgeAdopted:    c.PurgeAdopted,
		OnFailure:       policy,
		HistoryKeepDays: c.HistoryKeep,
		StopTimeout:     c.StopTimeout,
		Logger:          g.logger,

		MaxBatchesInFlight: c.InFlight,
		Breaker:            breaker,
	}, nil
}

// checkMigrated refuses a table that is missing or behind the latest
// schema version; fix says what to run.
func checkMigrated(ctx context.Context, st store.Store, table, fix string) error {
	// A missing table first: reading the migration version of an outbox
	// that was never migrated would create its version table.
	if _, err := st.CountMovable(ctx, true); err != nil {
		return err
	}
	if cur, latest, err := st.MigrationVersion(ctx); err != nil {
		return err
	} else if cur < latest {
		return fmt.Errorf("table %s is at schema version %d of %d: %s", table, cur, latest, fix)
	}
	return nil
}

// Run runs the relay until SIGINT/SIGTERM (or, with --drain, until done).
func (c *RelayCmd) Run(ctx context.Context, g *Globals) error {
	if c.Check {
		return c.destinationsFile(ctx, g)
	}
	if g.Config != "" {
		return c.runFanOut(ctx, g)
	}
	g.secrets.addURL(c.Sink)
	base, err := c.relayBase(g)
	if err != nil {
		return err
	}
	anchorKey, err := c.anchorKey()
	if err != nil {
		return err
	}
	policy := base.OnFailure
	routes, err := sink.ParseRouteOverrides(c.Route)
	if err != nil {
		return err
	}
	var admin *adminServer
	closeAdminAPI := func() error { return nil }
	if c.Admin != "" { // bound first: a busy port fails before any other work
		if admin, err = listenAdmin(c.Admin, g.logger); err != nil {
			return err
		}
		defer func() {
			admin.close()
			_ = closeAdminAPI() // once no request can be in flight
		}()
	}
	sk, err := openSinkLimited(ctx, c.Sink, c.RouteLimit, sinkOptions{Routes: routes, Logger: g.logger, Table: g.Table})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := sk.Close(cctx); err != nil {
			g.logger.Warn("closing the sink", "err", err)
		}
	}()
	b, err := openBackendWaiting(ctx, g.DB, g.Table, c.StartWait, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	if err := checkMigrated(ctx, b.store, g.Table, "run `outbox migrate` first"); err != nil {
		return err
	}
	if err := waitForSink(ctx, c.Sink, sk, c.StartWait, g.logger); err != nil {
		return err
	}
	if c.RelayID == "" {
		c.RelayID = relay.NewRelayID()
	}
	relayStore := b.store
	if c.Source == "logical" {
		src, err := c.openLogicalSource(ctx, g, b)
		if err != nil {
			return err
		}
		relayStore = src
		c.extraCollectors = append(c.extraCollectors, slotLagGauge(src), slotRecreationsCounter(src))
	}
	if c.Source == "binlog" {
		src, err := c.openBinlogSource(ctx, g, b)
		if err != nil {
			return err
		}
		defer src.Close()
		relayStore = src
		c.extraCollectors = append(c.extraCollectors, binlogCollectors(src)...)
	}
	observer := &inFlightObserver{}
	if admin != nil {
		if c.AdminAuth.enabled() {
			h, err := c.AdminAuth.handler(g, c.Admin, b.store, policy, routes, nil)
			if err != nil {
				return err
			}
			closeAdminAPI = h.Close
			admin.mountAdminAPI(h)
		}
		m, stopGauges, err := c.startAdminEndpoints(ctx, g, admin, b, sk, policy)
		if err != nil {
			return err
		}
		defer stopGauges()
		observer.next = m
	}
	stopHeartbeat := heartbeat(ctx, b.store, c.RelayID, c.Heartbeat, observer.inFlight, g.logger)
	defer stopHeartbeat()
	stopAnchors := c.startAnchors(ctx, g.logger, anchorKey, []anchoredTable{{g.Table, b.store}})
	defer stopAnchors()
	tracer, stopTracing, err := setupTracing(ctx, g.logger, c.Sink)
	if err != nil {
		return err
	}
	defer stopTracing()
	rc := base
	rc.Observer, rc.Tracer, rc.Store, rc.Sink, rc.RelayID = observer, tracer, relayStore, sk, c.RelayID
	rc.Keys = b.store // the data keys, whatever source claims
	r, err := relay.New(rc)
	if err != nil {
		return err
	}
	g.logger.Info("relay configured", "table", g.Table, "backend", b.kind, "source", c.Source, "sink", redactURL(c.Sink))
	stopProgress := c.reportProgress(ctx, g.logger, r, b)
	defer stopProgress()
	start := time.Now()
	if c.Drain {
		err = r.Drain(ctx)
	} else {
		err = r.Run(ctx)
	}
	st := r.Stats()
	elapsed := time.Since(start)
	g.logger.Info("relay finished", "delivered", st.Delivered, "retried", st.Retried, "failed", st.Failed,
		"expired", st.Expired+st.SweptExpired, "elapsed", elapsed.Round(time.Millisecond),
		"rate_per_s", fmt.Sprintf("%.0f", float64(st.Delivered)/max(elapsed.Seconds(), 1e-9)))
	if errors.Is(err, context.Canceled) && c.Drain {
		return fmt.Errorf("drain interrupted before it finished")
	}
	return err
}

// reportProgress logs counts and rates every --progress.
func (c *RelayCmd) reportProgress(ctx context.Context, log *slog.Logger, r *relay.Relay, b *backend) func() {
	if c.Progress <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(c.Progress)
		defer t.Stop()
		var last relay.Stats
		lastAt := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				st := r.Stats()
				rate := float64(st.Delivered-last.Delivered) / now.Sub(lastAt).Seconds()
				attrs := []any{"delivered", st.Delivered, "rate_per_s", fmt.Sprintf("%.0f", rate),
					"retried", st.Retried, "failed", st.Failed, "expired", st.Expired + st.SweptExpired}
				if c.Drain {
					if n, err := b.store.CountMovable(ctx, r.FailurePolicy() == relay.BlockAggregate); err == nil {
						attrs = append(attrs, "remaining", n)
					}
				}
				log.Info("progress", attrs...)
				last, lastAt = st, now
			}
		}
	}()
	return func() { cancel(); <-done }
}
