// Command bench runs the benchmark of docs/BENCHMARKS.md: this project
// (through benchkit), watermill-sql and River against the same PostgreSQL,
// with the same work, in one run, and prints the tables with ratios against
// the best peer. It is a module of its own so that the library never
// depends on the peers.
//
//	cd bench && go run . -scenario all
//	cd bench && go run . -scenario gateway -relays 1,2,4
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/txoutbox/outbox/internal/benchkit"
	"github.com/txoutbox/outbox/relay"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	defaultDB := os.Getenv("OUTBOX_TEST_POSTGRES")
	if defaultDB == "" {
		defaultDB = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	var (
		db          = fs.String("db", defaultDB, "PostgreSQL database (default $OUTBOX_TEST_POSTGRES or the local test database)")
		scenario    = fs.String("scenario", "all", "drain, steady, latency, gateway, or all (drain, steady and latency), comma-separated")
		systems     = fs.String("systems", "outbox,watermill,watermill-offsets,river,baresql", "systems to run, comma-separated: outbox, watermill (watermill-sql, DeleteOnAck), watermill-offsets (watermill-sql, acked column), river, baresql (the bare SQL loop, drain only)")
		events      = fs.Int("events", 0, "backlog size (default: drain 50,000, gateway 10,000)")
		gwDelay     = fs.Duration("gateway-delay", 20*time.Millisecond, "gateway: the time the HTTP gateway takes per request")
		relayCounts = fs.String("relays", "1,2,4", "gateway: numbers of relays (outbox) or forwarders (watermill) run at once, comma-separated")
		aggregates  = fs.Int("aggregates", 100, "aggregates the events are spread over")
		producers   = fs.Int("producers", 8, "steady and latency: producer goroutines")
		duration    = fs.Duration("duration", 10*time.Second, "steady: each phase; latency: each run")
		rates       = fs.String("rate", "200,1000", "latency: offered loads in events/s, comma-separated")
		runs        = fs.Int("runs", 3, "drain and steady: runs per system (medians are shown)")
		latencyRuns = fs.Int("latency-runs", 1, "latency: runs per rate")
		batch       = fs.Int("batch", 1000, "claim batch of outbox and the bare loop; SubscribeBatchSize of watermill-sql (River fetches up to its free workers)")
		poll        = fs.Duration("poll", 20*time.Millisecond, "poll interval of outbox, watermill-sql and the bare loop (River keeps its benchmark's 20ms)")
		linger      = fs.Duration("linger", 0, "outbox: least wait after a claim that took less than a full batch (0: the relay's default, 5ms)")
		wakeups     = fs.String("wakeups", "all,notify,poll", "outbox wake-up modes for latency rows: all, notify, poll (drain and steady use the first)")
		wakeSteady  = fs.Bool("wakeups-steady", false, "also run the other outbox wake-up modes in the steady scenario")
		jsonOut     = fs.Bool("json", false, "print the report as JSON")
		cpuProfile  = fs.String("cpuprofile", "", "write a CPU profile of the first timed outbox drain to this file")
		noAutovac   = fs.Bool("no-autovacuum", false, "do not stand in for the server's autovacuum when it is off (see docs/BENCHMARKS.md)")
		verbose     = fs.Bool("v", false, "log the systems' warnings to stderr")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	var scenarios []string
	if *scenario != "all" {
		scenarios = strings.Split(*scenario, ",")
	}
	rateList, err := numbers("-rate", *rates)
	if err != nil {
		return err
	}
	relayList, err := numbers("-relays", *relayCounts)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if *verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}

	var contenders []benchkit.Contender
	for _, name := range strings.Split(*systems, ",") {
		switch strings.TrimSpace(name) {
		case "outbox":
			modes := strings.Split(*wakeups, ",")
			for i, m := range modes {
				w, ok := map[string]benchkit.Wakeups{"all": benchkit.WakeAll, "notify": benchkit.WakeNotify, "poll": benchkit.WakePoll}[m]
				if !ok {
					return fmt.Errorf("-wakeups: unknown mode %q: use all, notify or poll", m)
				}
				label := "outbox"
				if i > 0 || m != "all" {
					label = "outbox " + m
				}
				c := benchkit.Contender{System: &benchkit.Outbox{Label: label, Wakeups: w, Relay: relay.Config{PollInterval: *poll, Linger: *linger}}, Role: benchkit.Self}
				if i > 0 {
					c.Role, c.Scenarios = benchkit.Reference, []string{benchkit.ScenarioLatency}
					if *wakeSteady {
						c.Scenarios = append(c.Scenarios, benchkit.ScenarioSteady)
					}
				}
				contenders = append(contenders, c)
			}
		case "watermill":
			contenders = append(contenders, benchkit.Contender{System: &Watermill{DeleteOnAck: true, PollInterval: *poll}, Role: benchkit.Peer})
		case "watermill-offsets":
			// Not in the gateway scenario: there the sink sets the pace, and
			// the acked column's cost is the drain's question.
			contenders = append(contenders, benchkit.Contender{System: &Watermill{PollInterval: *poll}, Role: benchkit.Peer,
				Scenarios: []string{benchkit.ScenarioDrain, benchkit.ScenarioSteady, benchkit.ScenarioLatency}})
		case "river":
			contenders = append(contenders, benchkit.Contender{System: &River{}, Role: benchkit.Peer})
		case "baresql":
			contenders = append(contenders, benchkit.Contender{System: &benchkit.BareSQL{PollInterval: *poll},
				Role: benchkit.Reference, Scenarios: []string{benchkit.ScenarioDrain}})
		default:
			return fmt.Errorf("-systems: unknown system %q", name)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := benchkit.Config{
		DSN: *db, Scenarios: scenarios, Events: *events, GatewayEvents: *events, GatewayDelay: *gwDelay, Relays: relayList,
		Aggregates: *aggregates, Producers: *producers,
		Duration: *duration, Rates: rateList, Runs: *runs, LatencyRuns: *latencyRuns, Batch: *batch,
		Logger: logger, NoAutovacuum: *noAutovac, Progress: func(s string) { fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), s) },
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		cfg.CPUProfile = f
	}
	start := time.Now()
	rep, err := benchkit.Run(ctx, cfg, contenders...)
	if rep != nil {
		if *jsonOut {
			_ = rep.WriteJSON(os.Stdout)
		} else {
			_ = rep.WriteTable(os.Stdout)
			fmt.Printf("\n(total %s)\n", time.Since(start).Round(time.Second))
		}
	}
	if errors.Is(err, context.Canceled) {
		return errors.New("interrupted; the tables above have what finished")
	}
	return err
}

// numbers parses a comma-separated list of integers given to flag.
func numbers(flag, list string) ([]int, error) {
	var out []int
	for _, s := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a number: give whole numbers separated by commas", flag, s)
		}
		out = append(out, n)
	}
	return out, nil
}
