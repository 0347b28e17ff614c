package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/txoutbox/outbox/internal/testenv"
)

// failingGateway answers 400 to every event of aggregate tx-4 (a poison
// event: FAILED, its followers BLOCKED) and 503 to the first request for
// tx-3 (one retry); everything else is accepted.
type failingGateway struct {
	mu       sync.Mutex
	flakySaw bool
}

func (g *failingGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var p struct{ Agg int }
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &p)
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case p.Agg == 4:
		w.WriteHeader(http.StatusBadRequest)
	case p.Agg == 3 && !g.flakySaw:
		g.flakySaw = true
		w.WriteHeader(http.StatusServiceUnavailable)
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// payloadMarker is in every payload: it must never appear in the
// endpoints or the logs.
const payloadMarker = "pan-4111111111111111"

// adminEventLines returns 20 events over aggregates tx-0..tx-4, each with
// a deadline an hour away.
func adminEventLines() string {
	var b strings.Builder
	for i := range 20 {
		fmt.Fprintf(&b, `{"aggregate_type":"payment","aggregate_id":"tx-%d","event_type":"ApprovalRequested","payload":{"agg":%d,"card":%q},"ttl":"1h"}`+"\n",
			i%5, i%5, payloadMarker)
	}
	return b.String()
}

// withPassword returns dsn with the password pw set (PostgreSQL's trust
// authentication ignores it).
func withPassword(t *testing.T, dsn, pw string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), pw)
	return u.String()
}

// adminRelay is a relay process started with --admin.
type adminRelay struct {
	cmd    *exec.Cmd
	stderr *testenv.Buffer
	addr   string
}

// startProcess runs the test binary as `outbox <args>` with env added.
func startProcess(t *testing.T, env []string, args ...string) (*exec.Cmd, *testenv.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "OUTBOX_TEST_EXEC_MAIN=1"), env...)
	return startCmd(t, cmd)
}

// startCmd starts cmd with its output in a buffer; it is killed when the
// test ends if it still runs.
func startCmd(t *testing.T, cmd *exec.Cmd) (*exec.Cmd, *testenv.Buffer) {
	t.Helper()
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
		}
	})
	return cmd, out
}

var adminAddrRE = regexp.MustCompile(`msg="admin endpoint listening" addr=(\S+)`)

func startAdminRelay(t *testing.T, args ...string) *adminRelay {
	t.Helper()
	cmd, stderr := startProcess(t, nil, append([]string{"relay", "--admin", "127.0.0.1:0", "--gauge-interval", "100ms",
		"--backoff-min", "10ms", "--backoff-max", "20ms", "--poll-interval", "50ms", "--sweep-interval", "100ms"}, args...)...)
	r := &adminRelay{cmd: cmd, stderr: stderr}
	waitUntil(t, 20*time.Second, "the admin endpoint", func() bool {
		if m := adminAddrRE.FindStringSubmatch(stderr.String()); m != nil {
			r.addr = m[1]
			return true
		}
		return cmd.ProcessState != nil
	}, stderr)
	if r.addr == "" {
		t.Fatalf("relay exited:\n%s", stderr.String())
	}
	return r
}

// stop sends SIGTERM and waits for a clean exit.
func (r *adminRelay) stop(t *testing.T) {
	t.Helper()
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	if err := r.cmd.Wait(); err != nil {
		t.Errorf("relay exit: %v\n%s", err, r.stderr.String())
	}
}

func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool, logs fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			extra := ""
			if logs != nil {
				extra = "\n" + logs.String()
			}
			t.Fatalf("timed out after %s waiting for %s%s", timeout, what, extra)
		}
		<-tick.C
	}
}

func httpGet(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// scrape parses /metrics.
func scrape(t *testing.T, addr string) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	code, body := httpGet(t, "http://"+addr+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams, body
}

// total adds up the values of family name's series that have the label
// pairs given.
func total(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
	sum := 0.0
	for _, m := range f.GetMetric() {
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
			}
			match = match && found
		}
		if match {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, true
}

// TestRelayAdminEndpoints runs a relay with --admin through a drain with
// failures and checks its /metrics, /healthz and /readyz, the dashboard's
// metrics against the scrape, that no secret or payload leaks, and (on
// PostgreSQL) a real Prometheus server scraping it.
func TestRelayAdminEndpoints(t *testing.T) {
	const password = "Adm1n-S3cret-pw"
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn := bc.dsn(t)
			if bc.name == "postgres" {
				dsn = withPassword(t, dsn, password)
			}
			table := newTable()
			mustCLI(t, "", "migrate", "--db", dsn, "--table", table)
			t.Cleanup(func() { cli(t, "", "migrate", "--down", "--yes", "--db", dsn, "--table", table) })
			mustCLI(t, adminEventLines(), "enqueue", "--db", dsn, "--table", table)
			gw := httptest.NewServer(&failingGateway{})
			t.Cleanup(gw.Close)

			r := startAdminRelay(t, "--db", dsn, "--table", table, "--sink", gw.URL)
			var fams map[string]*dto.MetricFamily
			var body string
			waitUntil(t, 30*time.Second, "16 deliveries, 1 retry, 1 failure and the gauges", func() bool {
				fams, body = scrape(t, r.addr)
				delivered, _ := total(fams, "outbox_deliveries_total", "outcome", "delivered")
				retried, _ := total(fams, "outbox_deliveries_total", "outcome", "retry")
				failed, _ := total(fams, "outbox_deliveries_total", "outcome", "failed")
				processed, _ := total(fams, "outbox_events", "status", "PROCESSED")
				blocked, _ := total(fams, "outbox_events", "status", "BLOCKED")
				return delivered == 16 && retried == 1 && failed == 1 && processed == 16 && blocked == 3
			}, r.stderr)
			for name, want := range map[string]float64{
				"outbox_dead_letters": 1, "outbox_blocked_aggregates": 1, "outbox_gauges_leader": 1,
				"outbox_lease_lost_total": 0, "outbox_store_errors_total": 0, "outbox_relay_info": 1,
				"outbox_deadline_margin_seconds": 16, "outbox_delivery_lag_seconds": 16,
			} {
				if got, ok := total(fams, name); !ok || got != want {
					t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
				}
			}
			if got, _ := total(fams, "outbox_events", "status", "FAILED"); got != 1 {
				t.Errorf("outbox_events{status=FAILED} = %v", got)
			}
			for _, name := range []string{"outbox_publish_duration_seconds", "outbox_claim_duration_seconds",
				"outbox_complete_duration_seconds", "go_goroutines", "process_resident_memory_bytes"} {
				if _, ok := fams[name]; !ok {
					t.Errorf("%s is missing from /metrics", name)
				}
			}
			if !strings.Contains(body, `version="dev"`) {
				t.Errorf("outbox_relay_info lacks the version")
			}
			checkDashboardAgainstScrape(t, fams)

			if code, got := httpGet(t, "http://"+r.addr+"/healthz"); code != 200 || got != "ok\n" {
				t.Errorf("/healthz = %d %q", code, got)
			}
			code, ready := httpGet(t, "http://"+r.addr+"/readyz")
			var res struct {
				Ready                  bool
				Database, Schema, Sink string
			}
			if err := json.Unmarshal([]byte(ready), &res); err != nil || code != 200 || !res.Ready ||
				res.Database != "reachable" || !strings.HasPrefix(res.Schema, "at version") {
				t.Errorf("/readyz = %d %s", code, ready)
			}
			for what, text := range map[string]string{"/metrics": body, "/readyz": ready, "the logs": r.stderr.String()} {
				if strings.Contains(text, password) || strings.Contains(text, payloadMarker) {
					t.Errorf("%s shows the DSN password or a payload:\n%s", what, text)
				}
			}
			if !strings.Contains(r.stderr.String(), "deliveries to a route are failing") {
				t.Errorf("the retried failure left no WARN line:\n%s", r.stderr.String())
			}
			if bc.name == "postgres" {
				t.Logf("scrape after a drain with failures:\n%s", outboxLines(body))
				checkWithPrometheus(t, r.addr, 16)
			}
			r.stop(t)
		})
	}
}

// outboxLines keeps the outbox_ samples of a scrape (not the histogram
// buckets), for the test log.
func outboxLines(body string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "outbox_") && !strings.Contains(l, "_bucket{") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// dashboardQueries returns the PromQL of every panel of the dashboard.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "outbox.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range dash.Panels {
		for _, q := range p.Targets {
			out = append(out, q.Expr)
		}
	}
	return out
}

var metricNameRE = regexp.MustCompile(`\boutbox_[a-z_]+`)

// checkDashboardAgainstScrape: every metric a dashboard query names is in
// the scrape (a histogram's _bucket and _count by their family).
func checkDashboardAgainstScrape(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	names := map[string]bool{}
	for _, q := range dashboardQueries(t) {
		for _, n := range metricNameRE.FindAllString(q, -1) {
			names[n] = true
		}
	}
	if len(names) < 10 {
		t.Fatalf("the dashboard names only %d metrics: %v", len(names), names)
	}
	for n := range names {
		base := n
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if b, ok := strings.CutSuffix(n, suffix); ok && fams[b] != nil && fams[b].GetType() == dto.MetricType_HISTOGRAM {
				base = b
			}
		}
		if fams[base] == nil {
			t.Errorf("the dashboard queries %s, which the relay does not export", n)
		}
	}
}

// checkWithPrometheus starts Debian's prometheus server on a private port
// and data directory, has it scrape the relay, and reads
// outbox_deliveries_total back through its query API; every dashboard
// query must run there too.
func checkWithPrometheus(t *testing.T, relayAddr string, delivered float64) {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		msg := "prometheus is not on PATH: install Debian's package prometheus to run the scrape test"
		if testenv.InCI() {
			t.Fatal(msg)
		}
		t.Log(msg + " (skipped)")
		return
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: outbox\n    static_configs:\n      - targets: [%q]\n", relayAddr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	promAddr := ln.Addr().String()
	ln.Close()
	cmd, stderr := startCmd(t, exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr))
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_, _ = cmd.Process.Wait()
	}()
	query := func(q string) (string, []any) {
		code, body := httpGet(t, "http://"+promAddr+"/api/v1/query?query="+url.QueryEscape(q))
		if code != 200 {
			return fmt.Sprintf("%d %s", code, body), nil
		}
		var res struct {
			Status string
			Data   struct{ Result []any }
		}
		_ = json.Unmarshal([]byte(body), &res)
		return res.Status, res.Data.Result
	}
	waitUntil(t, 60*time.Second, "Prometheus to scrape outbox_deliveries_total", func() bool {
		status, res := query(`sum(outbox_deliveries_total{outcome="delivered"})`)
		if status != "success" || len(res) != 1 {
			return false
		}
		v, _ := res[0].(map[string]any)["value"].([]any)
		return len(v) == 2 && v[1] == fmt.Sprint(delivered)
	}, stderr)
	// A rate needs two scrapes of the series: wait for them.
	waitUntil(t, 30*time.Second, "two scrapes", func() bool {
		_, res := query(`count_over_time(outbox_relay_info[1m]) >= 3`)
		return len(res) == 1
	}, stderr)
	for _, q := range dashboardQueries(t) {
		q = strings.ReplaceAll(q, "$__rate_interval", "1m")
		if status, res := query(q); status != "success" || len(res) == 0 {
			t.Errorf("dashboard query %s on a real Prometheus: %s, %d series", q, status, len(res))
		}
	}
}

func TestRelayAdminBadAddress(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "o.db")
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		addr, want string
		code       int
	}{
		{"nonsense", "is not host:port", 2},
		{"127.0.0.1:99999", "is not a number from 0 to 65535", 2},
		{"127.0.0.1:http", "is not a number", 2},
		{busy.Addr().String(), "the address is already in use", 1},
		{"192.0.2.1:9464", "is not an address of this machine", 1},
	} {
		_, stderr, code := cli(t, "", "relay", "--db", db, "--sink", "discard://", "--admin", tc.addr)
		if code != tc.code || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("--admin %s: exit %d, stderr %q; want exit %d and one line with %q", tc.addr, code, stderr, tc.code, tc.want)
		}
	}
}

func TestRelayAdminBeyondLoopbackWarns(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "o.db")
	mustCLI(t, "", "migrate", "--db", db)
	_, stderr, code := cli(t, "", "relay", "--db", db, "--sink", "discard://", "--drain", "--admin", "0.0.0.0:0")
	if code != 0 || !regexp.MustCompile(`level=WARN msg="the admin endpoint has no authentication`).MatchString(stderr) {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
	_, stderr, code = cli(t, "", "relay", "--db", db, "--sink", "discard://", "--drain", "--admin", "localhost:0")
	if code != 0 || strings.Contains(stderr, "no authentication") {
		t.Errorf("loopback admin warned or failed: exit %d, stderr:\n%s", code, stderr)
	}
}

func TestStatusMatchesTheGauges(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "o.db")
	mustCLI(t, "", "migrate", "--db", db)
	mustCLI(t, adminEventLines(), "enqueue", "--db", db)
	gw := httptest.NewServer(&failingGateway{})
	defer gw.Close()
	mustCLI(t, "", "relay", "--db", db, "--sink", gw.URL, "--drain", "--backoff-min", "10ms", "--backoff-max", "20ms", "--progress", "0")
	st := statusJSON(t, db, "outbox_events")
	for key, want := range map[string]int{"PROCESSED": 16, "FAILED": 1, "BLOCKED": 3, "dead_letters": 1, "blocked_aggregates": 1, "PENDING": 0} {
		if count(st, key) != want {
			t.Errorf("status --json %s = %d, want %d (%v)", key, count(st, key), want, st)
		}
	}
	if _, ok := st["oldest_due_pending_seconds"]; !ok {
		t.Errorf("status --json lacks oldest_due_pending_seconds: %v", st)
	}
	out := mustCLI(t, "", "status", "--db", db)
	if !strings.Contains(out, "oldest due pending") {
		t.Errorf("status lacks the oldest due pending line:\n%s", out)
	}
}
