package benchkit

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one row: one system in one scenario (and, for latency, one
// offered rate).
type Result struct {
	Scenario string `json:"scenario"`
	System   string `json:"system"`
	Role     Role   `json:"role"`
	// Rate is the offered load of a latency row, in events/s.
	Rate int `json:"rate,omitempty"`
	// Relays is the number of relays of a gateway row.
	Relays int `json:"relays,omitempty"`

	// EventsPerSec: drain and gateway, the median delivery rate; steady,
	// the events/s the relay delivered while the producers ran.
	EventsPerSec float64 `json:"events_per_sec,omitempty"`
	// Runs: drain, each run's events/s; steady, each run's share.
	Runs []float64 `json:"runs,omitempty"`
	// Duplicates: events the sink saw more than once (gateway: the
	// repeated requests, over all runs).
	Duplicates int64 `json:"duplicates,omitempty"`
	// OrderViolations: gateway, the events that reached the gateway after
	// a later event of their aggregate, over all runs.
	OrderViolations int64 `json:"order_violations,omitempty"`
	// WALBytesPerEvent: drain, the WAL the whole server wrote from the
	// relay's start until nothing was pending, divided by the events
	// (median over runs).
	WALBytesPerEvent float64 `json:"wal_bytes_per_event,omitempty"`
	// RowVersions: drain, the row versions the first run wrote to the
	// system's tables per event (pg_stat_user_tables).
	RowVersions *RowVersions `json:"row_versions_per_event,omitempty"`

	// TxPerSec: steady, producer tx/s with the relay running (median);
	// latency, the committed events/s actually achieved.
	TxPerSec float64 `json:"tx_per_sec,omitempty"`
	// BaselineTxPerSec: steady, producer tx/s with no relay (median).
	BaselineTxPerSec float64 `json:"baseline_tx_per_sec,omitempty"`
	// Share: steady, the median over runs of TxPerSec/BaselineTxPerSec.
	Share float64 `json:"share,omitempty"`
	// Backlog: steady, events pending when the producers stopped (median).
	Backlog int64 `json:"backlog,omitempty"`

	// Latency from COMMIT returned to the sink, over all samples.
	P50  time.Duration `json:"p50_ns,omitempty"`
	P99  time.Duration `json:"p99_ns,omitempty"`
	P999 time.Duration `json:"p999_ns,omitempty"`
	Max  time.Duration `json:"max_ns,omitempty"`
	// Produced and Delivered count a latency row's events.
	Produced  int64 `json:"produced,omitempty"`
	Delivered int64 `json:"delivered,omitempty"`

	// VsBestPeer is this row's figure divided by the best peer's: drain
	// and gateway events/s (gateway: at the same relay count), steady share (higher is better), latency p99 (lower is
	// better). 0 when there is no peer to compare with.
	VsBestPeer float64 `json:"vs_best_peer,omitempty"`
	// Err is set when the row could not be measured.
	Err string `json:"error,omitempty"`
}

// ReportConfig echoes the sizes a report was measured with.
type ReportConfig struct {
	Events      int    `json:"events"`
	Aggregates  int    `json:"aggregates"`
	Producers   int    `json:"producers"`
	Duration    string `json:"duration"`
	Rates       []int  `json:"rates"`
	Runs        int    `json:"runs"`
	LatencyRuns int    `json:"latency_runs"`
	Batch       int    `json:"batch,omitempty"`
	// GatewayEvents and GatewayDelay: the gateway scenario's backlog and
	// time per request.
	GatewayEvents int    `json:"gateway_events,omitempty"`
	GatewayDelay  string `json:"gateway_delay,omitempty"`
	// AutovacuumStandIn: the server's autovacuum was off and benchkit's
	// stand-in ran during the timed phases.
	AutovacuumStandIn bool `json:"autovacuum_stand_in"`
}

func reportConfig(c Config) ReportConfig {
	rc := ReportConfig{Events: c.Events, Aggregates: c.Aggregates, Producers: c.Producers, Duration: c.Duration.String(),
		Rates: c.Rates, Runs: c.Runs, LatencyRuns: c.LatencyRuns, Batch: c.Batch}
	for _, s := range c.Scenarios {
		if s == ScenarioGateway {
			rc.GatewayEvents, rc.GatewayDelay = c.GatewayEvents, c.GatewayDelay.String()
		}
	}
	return rc
}

// Report is the outcome of Run.
type Report struct {
	Environment Environment   `json:"environment"`
	Config      ReportConfig  `json:"config"`
	Results     []Result      `json:"results"`
	Memory      *MemoryResult `json:"memory,omitempty"`
}

func (r *Report) add(res Result) {
	r.Results = append(r.Results, res)
	r.compare()
}

// compare fills VsBestPeer for every row.
func (r *Report) compare() {
	type key struct {
		scenario string
		rate     int
		relays   int
	}
	best := map[key]float64{}
	figure := func(res Result) float64 {
		switch res.Scenario {
		case ScenarioDrain, ScenarioGateway:
			return res.EventsPerSec
		case ScenarioSteady:
			return res.Share
		case ScenarioLatency:
			return float64(res.P99)
		}
		return 0
	}
	for _, res := range r.Results {
		if res.Role != Peer || res.Err != "" || figure(res) <= 0 {
			continue
		}
		k := key{res.Scenario, res.Rate, res.Relays}
		f := figure(res)
		if b, ok := best[k]; !ok || (res.Scenario == ScenarioLatency && f < b) || (res.Scenario != ScenarioLatency && f > b) {
			best[k] = f
		}
	}
	for i := range r.Results {
		res := &r.Results[i]
		res.VsBestPeer = 0
		if b, ok := best[key{res.Scenario, res.Rate, res.Relays}]; ok && res.Err == "" && figure(*res) > 0 {
			res.VsBestPeer = figure(*res) / b
		}
	}
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report as plain-text tables, one per scenario.
func (r *Report) WriteTable(w io.Writer) error {
	e := r.Environment
	fmt.Fprintf(w, "machine: %d CPUs, %d MB, %s %s; PostgreSQL %s\n", e.CPUs, e.MemoryMB, e.GoVersion, e.OS, e.Postgres)
	if len(e.PGSettings) > 0 {
		keys := make([]string, 0, len(e.PGSettings))
		for k := range e.PGSettings {
			keys = append(keys, k+"="+e.PGSettings[k])
		}
		sort.Strings(keys)
		fmt.Fprintf(w, "postgres settings: %s\n", strings.Join(keys, " "))
	}
	c := r.Config
	if c.AutovacuumStandIn {
		fmt.Fprintln(w, "autovacuum is off on the server: benchkit's stand-in ANALYZEd/VACUUMed at autovacuum's default thresholds, checked every second, during steady and latency")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	section := func(title string) {
		tw.Flush()
		fmt.Fprintf(w, "\n%s\n", title)
	}
	rows := func(scenario string) []Result {
		var out []Result
		for _, res := range r.Results {
			if res.Scenario == scenario {
				out = append(out, res)
			}
		}
		return out
	}
	if rs := rows(ScenarioDrain); len(rs) > 0 {
		section(fmt.Sprintf("DRAIN: backlog of %d events over %d aggregates to a counting sink; median of %d runs (higher is better)",
			c.Events, c.Aggregates, c.Runs))
		fmt.Fprintln(tw, "system\trole\tevents/s\truns\tvs best peer\tWAL bytes/event\trow versions/event (HOT)\tdeletes/event\t")
		for _, res := range rs {
			if res.Err != "" {
				fmt.Fprintf(tw, "%s\t%s\tERROR: %s\t\t\t\t\t\t\n", res.System, res.Role, res.Err)
				continue
			}
			versions, deletes := "-", "-"
			if v := res.RowVersions; v != nil {
				versions, deletes = fmt.Sprintf("%.2f (%.2f)", v.Written(), v.HOTUpdates), fmt.Sprintf("%.2f", v.Deletes)
			}
			runs := make([]string, len(res.Runs))
			for i, x := range res.Runs {
				runs[i] = thousands(x)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", res.System, res.Role, thousands(res.EventsPerSec),
				strings.Join(runs, " "), ratio(res.VsBestPeer), thousands(res.WALBytesPerEvent), versions, deletes)
		}
	}
	if rs := rows(ScenarioSteady); len(rs) > 0 {
		section(fmt.Sprintf("STEADY: %d producers for %s, each tx = 1 business row + 1 event; relay running vs no relay; median of %d runs (higher is better)",
			c.Producers, c.Duration, c.Runs))
		fmt.Fprintln(tw, "system\trole\ttx/s relay\ttx/s no relay\tshare\tdelivered/s\tbacklog at end\tvs best peer\t")
		for _, res := range rs {
			if res.Err != "" {
				fmt.Fprintf(tw, "%s\t%s\tERROR: %s\t\t\t\t\t\t\n", res.System, res.Role, res.Err)
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.0f%%\t%s\t%d\t%s\t\n", res.System, res.Role, thousands(res.TxPerSec),
				thousands(res.BaselineTxPerSec), 100*res.Share, thousands(res.EventsPerSec), res.Backlog, ratio(res.VsBestPeer))
		}
	}
	if rs := rows(ScenarioLatency); len(rs) > 0 {
		section(fmt.Sprintf("LATENCY: COMMIT returned -> sink, fixed offered load, %d paced producers, %s x %d run(s) (lower is better)",
			c.Producers, c.Duration, c.LatencyRuns))
		fmt.Fprintln(tw, "system\trole\toffered/s\tachieved/s\tp50\tp99\tp99.9\tmax\tdelivered\tp99 vs best peer\t")
		for _, res := range rs {
			if res.Err != "" {
				fmt.Fprintf(tw, "%s\t%s\t%d\tERROR: %s\t\t\t\t\t\t\t\n", res.System, res.Role, res.Rate, res.Err)
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t\n", res.System, res.Role, res.Rate, thousands(res.TxPerSec),
				ms(res.P50), ms(res.P99), ms(res.P999), ms(res.Max), res.Delivered, res.Produced, ratio(res.VsBestPeer))
		}
	}
	if rs := rows(ScenarioGateway); len(rs) > 0 {
		section(fmt.Sprintf("GATEWAY: backlog of %d events over %d aggregates, delivered over HTTP to a gateway taking %s per request; median of %d runs (higher is better)",
			c.GatewayEvents, c.Aggregates, c.GatewayDelay, c.Runs))
		fmt.Fprintln(tw, "system\trole\trelays\tevents/s\truns\tvs best peer\torder violations\tduplicates\t")
		for _, res := range rs {
			if res.Err != "" {
				fmt.Fprintf(tw, "%s\t%s\t%d\tERROR: %s\t\t\t\t\t\n", res.System, res.Role, res.Relays, res.Err)
				continue
			}
			runs := make([]string, len(res.Runs))
			for i, x := range res.Runs {
				runs[i] = thousands(x)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%d\t\n", res.System, res.Role, res.Relays, thousands(res.EventsPerSec),
				strings.Join(runs, " "), ratio(res.VsBestPeer), res.OrderViolations, res.Duplicates)
		}
	}
	tw.Flush()
	if r.Memory != nil {
		fmt.Fprintln(w)
		r.Memory.WriteTable(w)
	}
	return nil
}

func ratio(x float64) string {
	if x == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", x)
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// thousands formats x rounded, with thousands separators.
func thousands(x float64) string {
	s := fmt.Sprintf("%.0f", x)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
