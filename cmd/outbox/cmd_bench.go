package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/benchkit"
	"github.com/txoutbox/outbox/relay"
)

// BenchCmd runs the benchmark of docs/BENCHMARKS.md for this project only;
// the bench/ module runs the same scenarios with the peers beside it.
type BenchCmd struct {
	Scenario      string        `help:"drain, steady, latency, all (those three) or memory (relay RSS as a separate process, steady load then a long run)." default:"all" enum:"drain,steady,latency,all,memory" env:"OUTBOX_BENCH_SCENARIO"`
	Events        int           `help:"Drain: backlog size." default:"50000" env:"OUTBOX_BENCH_EVENTS"`
	Aggregates    int           `help:"Events are spread over this many aggregates." default:"100" env:"OUTBOX_BENCH_AGGREGATES"`
	Producers     int           `help:"Steady, latency and memory: producer goroutines (one business row + one event per transaction)." default:"8" env:"OUTBOX_BENCH_PRODUCERS"`
	Duration      time.Duration `help:"Steady: length of each phase; latency: length of each run; memory: the steady phase." default:"10s" env:"OUTBOX_BENCH_DURATION"`
	Rate          []int         `help:"Latency: offered loads in events/s." default:"200,1000" env:"OUTBOX_BENCH_RATE"`
	Runs          int           `help:"Drain and steady: runs per system (the table shows medians)." default:"3" env:"OUTBOX_BENCH_RUNS"`
	LatencyRuns   int           `help:"Latency: runs per rate (percentiles over all samples)." default:"1" env:"OUTBOX_BENCH_LATENCY_RUNS"`
	Batch         int           `help:"Relay batch size." default:"1000" env:"OUTBOX_BENCH_BATCH"`
	PollInterval  time.Duration `help:"Relay poll interval (the bound on latency when no wake-up arrives)." default:"20ms" env:"OUTBOX_BENCH_POLL_INTERVAL"`
	Wakeups       []string      `help:"Latency: wake-up modes to compare: all (in-process nudge + LISTEN/NOTIFY), notify (LISTEN/NOTIFY only, as a relay in another process hears it) and poll (polling alone). Drain and steady use the first." default:"all,notify,poll" enum:"all,notify,poll" env:"OUTBOX_BENCH_WAKEUPS"`
	WakeupsSteady bool          `help:"Also run the other wake-up modes in the steady scenario (their cost to producers)." env:"OUTBOX_BENCH_WAKEUPS_STEADY"`
	Reference     bool          `help:"Drain: also run a bare SQL claim-and-delete loop, the floor the drain goal compares against (docs/BENCHMARKS.md)." env:"OUTBOX_BENCH_REFERENCE"`
	Admin         bool          `help:"Drain: also run the relay as with --admin (metrics, the gauges refreshed every second, /metrics scraped every second), to measure what watching it costs." env:"OUTBOX_BENCH_ADMIN"`
	MemoryEvents  int           `help:"Memory: events in the long run." default:"1000000" env:"OUTBOX_BENCH_MEMORY_EVENTS"`
	NoAutovacuum  bool          `help:"Do not stand in for the server's autovacuum when it is off (see docs/BENCHMARKS.md)." env:"OUTBOX_BENCH_NO_AUTOVACUUM"`
	CPUProfile    string        `name:"cpuprofile" help:"Write a CPU profile of the first timed drain (the relay at full speed) to this file." placeholder:"FILE" env:"OUTBOX_BENCH_CPUPROFILE"`
	JSON          bool          `name:"json" help:"Print the report as JSON instead of tables."`
}

var wakeupModes = map[string]benchkit.Wakeups{"all": benchkit.WakeAll, "notify": benchkit.WakeNotify, "poll": benchkit.WakePoll}

// Run runs the benchmark and prints the report.
func (c *BenchCmd) Run(ctx context.Context, g *Globals) error {
	if g.DB == "" {
		return fmt.Errorf("%w: no database given: pass --db postgres://... or set OUTBOX_DB (the benchmark needs PostgreSQL)", outbox.ErrInvalidConfig)
	}
	if s := strings.ToLower(g.DB); !strings.HasPrefix(s, "postgres://") && !strings.HasPrefix(s, "postgresql://") {
		return fmt.Errorf("%w: the benchmark runs on PostgreSQL only: pass --db postgres://user:pass@host:5432/db", outbox.ErrInvalidConfig)
	}
	if c.Batch < 1 || c.Events < 1 || c.Aggregates < 1 || c.Producers < 1 || c.Runs < 1 || c.LatencyRuns < 1 {
		return fmt.Errorf("%w: --batch, --events, --aggregates, --producers, --runs and --latency-runs must be at least 1", outbox.ErrInvalidConfig)
	}
	progress := newProgressLine(g.stderr)
	defer progress.done()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if g.LogLevel == "debug" {
		logger = g.logger
	}

	if c.Scenario == "memory" {
		return c.runMemory(ctx, g, progress.show)
	}
	var cpu *os.File
	if c.CPUProfile != "" {
		f, err := os.Create(c.CPUProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		cpu = f
	}
	scenarios := []string{c.Scenario}
	if c.Scenario == "all" {
		scenarios = nil
	}
	cfg := benchkit.Config{
		DSN: g.DB, Scenarios: scenarios, Events: c.Events, Aggregates: c.Aggregates, Producers: c.Producers,
		Duration: c.Duration, Rates: c.Rate, Runs: c.Runs, LatencyRuns: c.LatencyRuns, Batch: c.Batch,
		Logger: logger, Progress: progress.show, NoAutovacuum: c.NoAutovacuum,
	}
	if cpu != nil {
		cfg.CPUProfile = cpu
	}
	var contenders []benchkit.Contender
	for i, w := range c.Wakeups {
		name := "outbox"
		if i > 0 || w != "all" {
			name = "outbox " + w
		}
		ct := benchkit.Contender{
			System: &benchkit.Outbox{Label: name, Wakeups: wakeupModes[w], Relay: relay.Config{PollInterval: c.PollInterval}},
			Role:   benchkit.Self,
		}
		if i > 0 {
			ct.Role = benchkit.Reference
			ct.Scenarios = []string{benchkit.ScenarioLatency}
			if c.WakeupsSteady {
				ct.Scenarios = append(ct.Scenarios, benchkit.ScenarioSteady)
			}
		}
		contenders = append(contenders, ct)
	}
	if len(contenders) == 0 {
		return fmt.Errorf("%w: --wakeups is empty", outbox.ErrInvalidConfig)
	}
	if c.Admin {
		contenders = append(contenders, benchkit.Contender{
			System: &benchkit.Outbox{Label: "outbox +admin", Wakeups: wakeupModes[c.Wakeups[0]],
				Relay: relay.Config{PollInterval: c.PollInterval}, Observe: benchAdmin(logger)},
			Role: benchkit.Reference, Scenarios: []string{benchkit.ScenarioDrain}})
	}
	if c.Reference {
		contenders = append(contenders, benchkit.Contender{System: &benchkit.BareSQL{PollInterval: c.PollInterval},
			Role: benchkit.Reference, Scenarios: []string{benchkit.ScenarioDrain}})
	}
	rep, err := benchkit.Run(ctx, cfg, contenders...)
	progress.done()
	if rep != nil {
		if c.JSON {
			if werr := rep.WriteJSON(g.stdout); werr != nil && err == nil {
				err = werr
			}
		} else if werr := rep.WriteTable(g.stdout); werr != nil && err == nil {
			err = werr
		}
	}
	if errors.Is(err, context.Canceled) {
		return errors.New("benchmark interrupted; the table above has what finished")
	}
	return err
}

// runMemory runs `outbox relay` (this binary) as a separate process and
// samples its RSS.
func (c *BenchCmd) runMemory(ctx context.Context, g *Globals, progress func(string)) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary to run `outbox relay`: %w", err)
	}
	var relayLog bytes.Buffer
	res, err := benchkit.MeasureRelayMemory(ctx, benchkit.MemoryConfig{
		DSN: g.DB, Producers: c.Producers, Duration: c.Duration, Events: c.MemoryEvents, Aggregates: c.Aggregates,
		Progress: progress, NoAutovacuum: c.NoAutovacuum,
		Command: func(dsn string) *exec.Cmd {
			cmd := exec.CommandContext(ctx, self, "relay", "--db", dsn, "--sink", "discard://",
				"--batch", strconv.Itoa(c.Batch), "--poll-interval", c.PollInterval.String(),
				"--progress", "0", "--log-level", "warn")
			cmd.Stdout, cmd.Stderr = &relayLog, &relayLog
			return cmd
		},
	})
	progress("")
	if err != nil {
		if relayLog.Len() > 0 {
			fmt.Fprintf(g.stderr, "relay output:\n%s", g.secrets.redact(relayLog.String()))
		}
		return err
	}
	rep := &benchkit.Report{Memory: res}
	if c.JSON {
		return rep.WriteJSON(g.stdout)
	}
	res.WriteTable(g.stdout)
	return nil
}

// progressLine shows the latest progress on one line of a terminal, or one
// line per update elsewhere.
type progressLine struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	shown bool
}

func newProgressLine(w io.Writer) *progressLine {
	p := &progressLine{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progressLine) show(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.shown = line != ""
		return
	}
	if line != "" {
		fmt.Fprintf(p.w, "bench: %s\n", line)
	}
}

func (p *progressLine) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}
