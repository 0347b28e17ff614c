package benchkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Scenario names.
const (
	ScenarioDrain   = "drain"
	ScenarioSteady  = "steady"
	ScenarioLatency = "latency"
	// ScenarioGateway is sink-bound: delivery over HTTP to a gateway that
	// takes a fixed time per request. It is not in the default list.
	ScenarioGateway = "gateway"
)

// Role says how a system's rows are compared.
type Role int

const (
	// Self is this project: compared against the best peer.
	Self Role = iota
	// Peer is another system; the best peer sets the bar.
	Peer
	// Reference is a floor or ceiling shown for context, never the bar.
	Reference
)

func (r Role) String() string {
	switch r {
	case Self:
		return "self"
	case Peer:
		return "peer"
	}
	return "reference"
}

// MarshalText implements encoding.TextMarshaler.
func (r Role) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Contender is a system in a benchmark run.
type Contender struct {
	System System
	Role   Role
	// Scenarios limits the scenarios run for this system; empty means all.
	Scenarios []string
}

func (c Contender) runs(scenario string) bool {
	if len(c.Scenarios) == 0 {
		return true
	}
	for _, s := range c.Scenarios {
		if s == scenario {
			return true
		}
	}
	return false
}

// Config configures a benchmark run. Zero fields take the defaults.
type Config struct {
	// DSN is the PostgreSQL database (postgres://...). Required.
	DSN string
	// Scenarios to run, in this order: drain, steady, latency, gateway.
	// Default drain, steady and latency.
	Scenarios []string
	// Events is the drain backlog. Default 50,000.
	Events int
	// Aggregates spreads events over this many aggregates. Default 100.
	Aggregates int
	// Producers is the number of producer goroutines (steady and
	// latency). Default 8.
	Producers int
	// Duration of each steady phase and each latency run. Default 10s.
	Duration time.Duration
	// Rates are the offered loads of the latency scenario, in events/s.
	// Default 200 and 1000.
	Rates []int
	// Runs of drain and steady; the report gives medians. Default 3.
	Runs int
	// LatencyRuns per rate; percentiles are over all runs' samples.
	// Default 1.
	LatencyRuns int
	// Batch is handed to every system (Env.Batch); 0 lets each use its own
	// benchmark setting.
	Batch int
	// SchemaPrefix names the systems' schemas. Default "outbox_bench_".
	SchemaPrefix string
	// Logger receives the systems' logs. Default: warnings to nowhere.
	Logger *slog.Logger
	// Progress, when set, receives a one-line status every ~second.
	Progress func(line string)
	// CPUProfile, when set, receives a CPU profile of the first timed
	// drain of the Self system (the relay at full speed).
	CPUProfile io.Writer
	// GatewayEvents is the gateway scenario's backlog. Default 10,000.
	GatewayEvents int
	// GatewayDelay is the time the gateway takes per request. Default
	// 20ms.
	GatewayDelay time.Duration
	// Relays are the numbers of relays the gateway scenario runs at once,
	// one row each. Default 1, 2 and 4.
	Relays []int
	// NoAutovacuum turns off the stand-in for autovacuum (see
	// docs/BENCHMARKS.md) that runs during the steady and latency phases
	// when the server's own autovacuum is off.
	NoAutovacuum bool
}

func (c Config) withDefaults() Config {
	if len(c.Scenarios) == 0 {
		c.Scenarios = []string{ScenarioDrain, ScenarioSteady, ScenarioLatency}
	}
	if c.Events == 0 {
		c.Events = 50_000
	}
	if c.Aggregates == 0 {
		c.Aggregates = 100
	}
	if c.Producers == 0 {
		c.Producers = 8
	}
	if c.Duration == 0 {
		c.Duration = 10 * time.Second
	}
	if len(c.Rates) == 0 {
		c.Rates = []int{200, 1000}
	}
	if c.GatewayEvents == 0 {
		c.GatewayEvents = 10_000
	}
	if c.GatewayDelay == 0 {
		c.GatewayDelay = 20 * time.Millisecond
	}
	if len(c.Relays) == 0 {
		c.Relays = []int{1, 2, 4}
	}
	if c.Runs == 0 {
		c.Runs = 3
	}
	if c.LatencyRuns == 0 {
		c.LatencyRuns = 1
	}
	if c.SchemaPrefix == "" {
		c.SchemaPrefix = "outbox_bench_"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Progress == nil {
		c.Progress = func(string) {}
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.DSN == "":
		return errors.New("benchkit: no database: set Config.DSN (postgres://...)")
	case c.Events < 1, c.Aggregates < 1, c.Producers < 1, c.Runs < 1, c.LatencyRuns < 1:
		return errors.New("benchkit: events, aggregates, producers and runs must be at least 1")
	case c.Duration < 100*time.Millisecond:
		return fmt.Errorf("benchkit: duration %s is too short: use at least 100ms", c.Duration)
	case c.Batch < 0:
		return fmt.Errorf("benchkit: batch %d is negative", c.Batch)
	case c.GatewayEvents < 1:
		return fmt.Errorf("benchkit: gateway events %d must be at least 1", c.GatewayEvents)
	case c.GatewayDelay < 0:
		return fmt.Errorf("benchkit: gateway delay %s is negative: use 0 or more", c.GatewayDelay)
	}
	for _, n := range c.Relays {
		if n < 1 {
			return fmt.Errorf("benchkit: relay count %d must be at least 1", n)
		}
	}
	for _, r := range c.Rates {
		if r < 1 {
			return fmt.Errorf("benchkit: rate %d must be at least 1 event/s", r)
		}
	}
	for _, s := range c.Scenarios {
		switch s {
		case ScenarioDrain, ScenarioSteady, ScenarioLatency, ScenarioGateway:
		default:
			return fmt.Errorf("benchkit: unknown scenario %q: use drain, steady, latency or gateway", s)
		}
	}
	return nil
}

// contender is a Contender set up in its schema.
type contender struct {
	Contender
	name     string
	schema   string
	env      Env
	producer *pgxpool.Pool
	ready    bool
}

type runner struct {
	cfg    Config
	admin  *pgxpool.Pool
	cs     []*contender
	report *Report
	// serverAutovacuum is true when the server's autovacuum is on: then
	// the stand-in stays off.
	serverAutovacuum bool
}

// autovacuum starts the autovacuum stand-in for c's schema.
func (r *runner) autovacuum(ctx context.Context, c *contender) func() {
	return startAutovacuum(ctx, r.admin, c.schema, r.cfg.NoAutovacuum || r.serverAutovacuum)
}

func serverAutovacuumOn(ctx context.Context, admin *pgxpool.Pool) bool {
	var on string
	_ = admin.QueryRow(ctx, `SHOW autovacuum`).Scan(&on)
	return on == "on"
}

// Run sets up every contender in its own schema, runs the scenarios (runs
// of different systems interleaved, so that noise on the machine spreads
// over all of them), drops the schemas and returns the report. Rows that
// failed carry their error; Run itself fails only when nothing can run.
func Run(ctx context.Context, cfg Config, contenders ...Contender) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if len(contenders) == 0 {
		return nil, errors.New("benchkit: no system to run")
	}
	admin, err := openPool(ctx, cfg.DSN, "", 2, nil)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	r := &runner{cfg: cfg, admin: admin, report: &Report{Config: reportConfig(cfg)}}
	r.report.Environment = CollectEnvironment(ctx, admin)
	r.serverAutovacuum = serverAutovacuumOn(ctx, admin)
	r.report.Config.AutovacuumStandIn = !cfg.NoAutovacuum && !r.serverAutovacuum

	seen := map[string]bool{}
	for _, c := range contenders {
		name := c.System.Name()
		if seen[name] {
			return nil, fmt.Errorf("benchkit: two systems are named %q", name)
		}
		seen[name] = true
		r.cs = append(r.cs, &contender{Contender: c, name: name, schema: cfg.SchemaPrefix + schemaSuffix(name)})
	}
	defer r.teardown()
	for _, c := range r.cs {
		cfg.Progress(fmt.Sprintf("setting up %s in schema %s", c.name, c.schema))
		if err := r.setup(ctx, c); err != nil {
			r.report.add(Result{Scenario: "setup", System: c.name, Role: c.Role, Err: err.Error()})
		}
	}
	for _, s := range cfg.Scenarios {
		switch s {
		case ScenarioDrain:
			r.drain(ctx)
		case ScenarioSteady:
			r.steady(ctx)
		case ScenarioLatency:
			r.latency(ctx)
		case ScenarioGateway:
			r.gateway(ctx)
		}
		if ctx.Err() != nil {
			return r.report, ctx.Err()
		}
	}
	return r.report, nil
}

func schemaSuffix(name string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(name) {
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// WithSearchPath returns dsn with search_path set to schema.
func WithSearchPath(dsn, schema string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " search_path=" + schema
}

func openPool(ctx context.Context, dsn, schema string, maxConns int, configure func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("benchkit: cannot parse the database URL: %w", err)
	}
	if schema != "" {
		pc.ConnConfig.RuntimeParams["search_path"] = schema
	}
	pc.MaxConns = int32(maxConns)
	if configure != nil {
		configure(pc)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("benchkit: connect to PostgreSQL at %s:%d: %w", pc.ConnConfig.Host, pc.ConnConfig.Port, err)
	}
	return pool, nil
}

const paymentsTable = `CREATE TABLE bench_payments (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	payment_id text NOT NULL,
	amount bigint NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now())`

func (r *runner) setup(ctx context.Context, c *contender) error {
	schema := pgx.Identifier{c.schema}.Sanitize()
	if _, err := r.admin.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`); err != nil {
		return err
	}
	if _, err := r.admin.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		return err
	}
	if _, err := r.admin.Exec(ctx, strings.Replace(paymentsTable, "bench_payments", schema+".bench_payments", 1)); err != nil {
		return err
	}
	c.env = Env{
		Schema: c.schema,
		DSN:    WithSearchPath(r.cfg.DSN, c.schema),
		Batch:  r.cfg.Batch,
		Logger: r.cfg.Logger.With("system", c.name),
		NewPool: func(ctx context.Context, maxConns int) (*pgxpool.Pool, error) {
			return openPool(ctx, r.cfg.DSN, c.schema, maxConns, nil)
		},
		NewPoolWith: func(ctx context.Context, maxConns int, configure func(*pgxpool.Config)) (*pgxpool.Pool, error) {
			return openPool(ctx, r.cfg.DSN, c.schema, maxConns, configure)
		},
	}
	p, err := c.env.NewPool(ctx, r.cfg.Producers+2)
	if err != nil {
		return err
	}
	c.producer = p
	if err := c.System.Setup(ctx, c.env); err != nil {
		return fmt.Errorf("set up %s: %w", c.name, err)
	}
	c.ready = true
	return nil
}

func (r *runner) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range r.cs {
		if c.ready {
			_ = c.System.Teardown(ctx)
		}
		if c.producer != nil {
			c.producer.Close()
		}
		_, _ = r.admin.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{c.schema}.Sanitize()+` CASCADE`)
	}
}

// clean empties a system's tables and the business table, then VACUUM
// ANALYZEs every table of its schema and checkpoints, so that no run pays
// for the dead tuples or dirty pages of the one before.
func (r *runner) clean(ctx context.Context, c *contender) error {
	if err := c.System.Reset(ctx); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	if _, err := c.producer.Exec(ctx, `TRUNCATE bench_payments RESTART IDENTITY`); err != nil {
		return err
	}
	return r.vacuum(ctx, c)
}

func (r *runner) vacuum(ctx context.Context, c *contender) error {
	rows, err := r.admin.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1`, c.schema)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(tables) > 0 {
		names := make([]string, len(tables))
		for i, t := range tables {
			names[i] = pgx.Identifier{c.schema, t}.Sanitize()
		}
		if _, err := r.admin.Exec(ctx, `VACUUM ANALYZE `+strings.Join(names, ", ")); err != nil {
			return fmt.Errorf("vacuum: %w", err)
		}
	}
	// CHECKPOINT needs superuser or pg_checkpoint; without it, runs are
	// only noisier.
	_, _ = r.admin.Exec(ctx, `CHECKPOINT`)
	return nil
}

// each calls f for every ready contender that runs scenario, runs times,
// interleaving the systems.
func (r *runner) each(scenario string, runs int, f func(c *contender, run int)) {
	for run := 1; run <= runs; run++ {
		for _, c := range r.cs {
			if c.ready && c.runs(scenario) {
				f(c, run)
			}
		}
	}
}

// profileOnce starts the CPU profile the first time it is called for the
// Self system and returns the function that stops it.
func (r *runner) profileOnce(c *contender, started *bool) func() {
	if r.cfg.CPUProfile == nil || c.Role != Self || *started {
		return func() {}
	}
	*started = true
	if err := pprof.StartCPUProfile(r.cfg.CPUProfile); err != nil {
		r.cfg.Logger.Warn("cpu profile", "err", err)
		return func() {}
	}
	return pprof.StopCPUProfile
}
