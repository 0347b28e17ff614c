package benchkit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"
)

// MemoryConfig configures MeasureRelayMemory. Zero fields take defaults.
type MemoryConfig struct {
	// DSN is the benchmark database. Required.
	DSN string
	// Schema holds the outbox table. Default "outbox_bench_memory".
	Schema string
	// Producers and Duration shape the steady phase: producers committing
	// one business row and one event per transaction. Defaults 8 and 10s.
	Producers int
	Duration  time.Duration
	// Events is the size of the long run. Default 1,000,000.
	Events int
	// Aggregates spreads the events. Default 100.
	Aggregates int
	// Command returns the relay process: it must deliver the table
	// outbox_events of dsn (whose search_path is Schema) to a sink that
	// drops the events, until SIGTERM. Required.
	Command func(dsn string) *exec.Cmd
	// SampleEvery is the RSS sampling period. Default 250ms.
	SampleEvery time.Duration
	// Progress, when set, receives a one-line status now and then.
	Progress func(string)
	// NoAutovacuum turns off the autovacuum stand-in (see Config).
	NoAutovacuum bool
}

// MemorySample is the relay's state at one point of the long run.
type MemorySample struct {
	Elapsed   time.Duration `json:"elapsed_ns"`
	Delivered int64         `json:"delivered"`
	RSS       int64         `json:"rss_bytes"`
	// EventsPerSec is the delivery rate since the previous sample.
	EventsPerSec float64 `json:"events_per_sec"`
	// DeadTuples is n_dead_tup of the outbox table.
	DeadTuples int64 `json:"dead_tuples"`
}

// MemoryResult is what MeasureRelayMemory found.
type MemoryResult struct {
	// SteadyTxPerSec is the producers' rate during the steady phase.
	SteadyTxPerSec float64 `json:"steady_tx_per_sec"`
	// SteadyRSS is the median RSS over the second half of the steady phase;
	// SteadyRSSMax the largest sample of the whole phase.
	SteadyRSS    int64 `json:"steady_rss_bytes"`
	SteadyRSSMax int64 `json:"steady_rss_max_bytes"`
	// LongEvents were loaded and delivered in LongDuration.
	LongEvents   int64         `json:"long_events"`
	LongDuration time.Duration `json:"long_duration_ns"`
	// Long has one sample at each tenth of the long run.
	Long []MemorySample `json:"long"`
	// PeakRSS is the relay process's VmHWM at the end.
	PeakRSS int64 `json:"peak_rss_bytes"`
}

// MeasureRelayMemory starts the relay as a separate process and samples its
// RSS from /proc/PID/status, first under a steady producer load, then over
// a long run of cfg.Events events (loaded in bulk while the relay runs,
// keeping at most 100,000 pending). It reports the delivery rate and the
// outbox table's dead tuples at each tenth of the long run, so that a
// slowdown over the run shows.
func MeasureRelayMemory(ctx context.Context, cfg MemoryConfig) (*MemoryResult, error) {
	if cfg.DSN == "" || cfg.Command == nil {
		return nil, errors.New("benchkit: MeasureRelayMemory needs DSN and Command")
	}
	if cfg.Schema == "" {
		cfg.Schema = "outbox_bench_memory"
	}
	if cfg.Producers == 0 {
		cfg.Producers = 8
	}
	if cfg.Duration == 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.Events == 0 {
		cfg.Events = 1_000_000
	}
	if cfg.Aggregates == 0 {
		cfg.Aggregates = 100
	}
	if cfg.SampleEvery == 0 {
		cfg.SampleEvery = 250 * time.Millisecond
	}
	progress := cfg.Progress
	if progress == nil {
		progress = func(string) {}
	}

	rn := &runner{cfg: Config{DSN: cfg.DSN, Producers: cfg.Producers, Progress: progress}.withDefaults()}
	admin, err := openPool(ctx, cfg.DSN, "", 2, nil)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	rn.admin = admin
	sys := &Outbox{}
	c := &contender{Contender: Contender{System: sys, Role: Self}, name: "outbox", schema: cfg.Schema}
	rn.cs = []*contender{c}
	defer rn.teardown()
	if err := rn.setup(ctx, c); err != nil {
		return nil, err
	}
	if err := rn.vacuum(ctx, c); err != nil {
		return nil, err
	}
	stopAutovacuum := startAutovacuum(ctx, admin, cfg.Schema, cfg.NoAutovacuum || serverAutovacuumOn(ctx, admin))
	defer stopAutovacuum()

	cmd := cfg.Command(c.env.DSN)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the relay: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	pid := cmd.Process.Pid
	select {
	case err := <-exited:
		exited <- err
		return nil, fmt.Errorf("the relay exited at start: %v", err)
	case <-time.After(time.Second):
	}

	res := &MemoryResult{}
	// Steady phase.
	var samples []int64
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(cfg.SampleEvery)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				if rss, _, err := procMemory(pid); err == nil {
					samples = append(samples, rss)
				}
			}
		}
	}()
	progress(fmt.Sprintf("memory: steady phase, %d producers for %s", cfg.Producers, cfg.Duration))
	var seq atomic.Int64
	n, err := produceFor(ctx, c.producer, sys, cfg.Producers, cfg.Aggregates, cfg.Duration, &seq)
	stopSampling()
	<-sampled
	if err != nil {
		return nil, err
	}
	if len(samples) == 0 {
		// A phase shorter than SampleEvery, or a loaded machine whose
		// ticker did not fire in it: sample once now, so that the phase
		// still reports the relay's RSS.
		if rss, _, err := procMemory(pid); err == nil {
			samples = append(samples, rss)
		}
	}
	res.SteadyTxPerSec = float64(n) / cfg.Duration.Seconds()
	if len(samples) > 0 {
		half := samples[len(samples)/2:]
		fs := make([]float64, len(half))
		for i, s := range half {
			fs[i] = float64(s)
		}
		res.SteadyRSS = int64(median(fs))
		sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
		res.SteadyRSSMax = samples[len(samples)-1]
	}
	if err := pollUntil(ctx, 50*time.Millisecond, 5*time.Minute, func() (bool, error) {
		p, err := sys.Pending(ctx)
		return p == 0, err
	}); err != nil {
		return nil, fmt.Errorf("steady phase: the relay did not catch up: %w", err)
	}

	// Long run.
	progress(fmt.Sprintf("memory: long run of %d events", cfg.Events))
	var loaded atomic.Int64
	loadErr := make(chan error, 1)
	lctx, stopLoading := context.WithCancel(ctx)
	defer stopLoading()
	go func() {
		const chunk = 5000
		evs := make([]Event, 0, chunk)
		for next := seq.Load(); loaded.Load() < int64(cfg.Events); {
			if p, err := sys.Pending(lctx); err != nil {
				loadErr <- err
				return
			} else if p > 100_000 {
				select {
				case <-lctx.Done():
					loadErr <- lctx.Err()
					return
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			evs = evs[:0]
			for k := 0; k < chunk && loaded.Load()+int64(k) < int64(cfg.Events); k++ {
				evs = append(evs, NewEvent(next, cfg.Aggregates))
				next++
			}
			if err := sys.Load(lctx, evs); err != nil {
				loadErr <- err
				return
			}
			loaded.Add(int64(len(evs)))
		}
		loadErr <- nil
	}()
	start := time.Now()
	tenth := max(int64(cfg.Events)/10, 1)
	var last MemorySample
	err = pollUntil(ctx, cfg.SampleEvery, 2*time.Hour, func() (bool, error) {
		select {
		case err := <-loadErr:
			if err != nil {
				return false, fmt.Errorf("load: %w", err)
			}
			loadErr <- nil // keep the news for the next poll
		default:
		}
		pending, err := sys.Pending(ctx)
		if err != nil {
			return false, err
		}
		delivered := loaded.Load() - pending
		rss, _, err := procMemory(pid)
		if err != nil {
			return false, fmt.Errorf("the relay process is gone: %w", err)
		}
		if delivered >= (int64(len(res.Long))+1)*tenth || delivered >= int64(cfg.Events) {
			s := MemorySample{Elapsed: time.Since(start), Delivered: delivered, RSS: rss}
			if dt := (s.Elapsed - last.Elapsed).Seconds(); dt > 0 {
				s.EventsPerSec = float64(s.Delivered-last.Delivered) / dt
			}
			_ = admin.QueryRow(ctx, `SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2`,
				cfg.Schema, "outbox_events").Scan(&s.DeadTuples)
			res.Long = append(res.Long, s)
			last = s
			progress(fmt.Sprintf("memory: %d/%d delivered, RSS %.1f MB, %.0f events/s", delivered, cfg.Events, mb(rss), s.EventsPerSec))
		}
		return delivered >= int64(cfg.Events), nil
	})
	if err != nil {
		return nil, err
	}
	res.LongEvents = int64(cfg.Events)
	res.LongDuration = time.Since(start)
	if _, hwm, err := procMemory(pid); err == nil {
		res.PeakRSS = hwm
	}
	return res, nil
}

// procMemory reads VmRSS and VmHWM (bytes) of a process.
func procMemory(pid int) (rss, hwm int64, err error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		for _, field := range []struct {
			prefix string
			dst    *int64
		}{{"VmRSS:", &rss}, {"VmHWM:", &hwm}} {
			if v, ok := strings.CutPrefix(line, field.prefix); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				*field.dst = kb * 1024
			}
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("no VmRSS in /proc/%d/status (is it a zombie?)", pid)
	}
	return rss, hwm, sc.Err()
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// WriteTable writes the memory result as text.
func (m *MemoryResult) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "RELAY MEMORY (separate process, /proc/PID/status)\n")
	fmt.Fprintf(w, "steady phase: %s tx/s, RSS median %.1f MB, max %.1f MB\n", thousands(m.SteadyTxPerSec), mb(m.SteadyRSS), mb(m.SteadyRSSMax))
	fmt.Fprintf(w, "long run: %d events in %s, peak RSS (VmHWM) %.1f MB\n", m.LongEvents, m.LongDuration.Round(time.Second), mb(m.PeakRSS))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "delivered\telapsed\tRSS\tevents/s (this tenth)\tdead tuples\t")
	for _, s := range m.Long {
		fmt.Fprintf(tw, "%d\t%s\t%.1f MB\t%s\t%d\t\n", s.Delivered, s.Elapsed.Round(time.Second), mb(s.RSS), thousands(s.EventsPerSec), s.DeadTuples)
	}
	tw.Flush()
}
