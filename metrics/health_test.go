package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/metrics"
	"github.com/txoutbox/outbox/relay/relaytest"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/sqlite"
	"github.com/txoutbox/outbox/store/storetest"
)

// healthSink reports a fixed reachability.
type healthSink struct {
	relaytest.Recorder
	ok    bool
	err   error
	since time.Time
}

func (h *healthSink) Reachable() (bool, error, time.Time) { return h.ok, h.err, h.since }

func get(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func serve(t *testing.T, cfg metrics.HandlerConfig) *httptest.Server {
	mux := http.NewServeMux()
	metrics.Mount(mux, cfg)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestEndpoints(t *testing.T) {
	t.Parallel()
	b := openBackend(t, "sqlite")
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(metrics.Config{Registerer: reg, RelayID: "r1"}); err != nil {
		t.Fatal(err)
	}
	since := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name      string
		sink      sink.Sink
		code      int
		sinkState string
	}{
		{"no health", &relaytest.Recorder{}, 200, "unknown"},
		{"reached", &healthSink{ok: true}, 200, "reached"},
		{"known down", &healthSink{err: errors.New("dial tcp: connection refused"), since: since}, 200,
			"down since 2030-01-02T03:04:05Z: dial tcp: connection refused"},
		{"not reached yet", &healthSink{}, 503, "not reached yet"},
	}
	_, latest, err := b.store.MigrationVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	atLatest := fmt.Sprintf("at version %d of %d", latest, latest)
	for _, tc := range cases {
		srv := serve(t, metrics.HandlerConfig{Gatherer: reg, Store: b.store, Sink: tc.sink})
		code, body := get(t, srv, "/readyz")
		var res metrics.Readiness
		if err := json.Unmarshal([]byte(body), &res); err != nil {
			t.Fatalf("%s: /readyz body %q: %v", tc.name, body, err)
		}
		if code != tc.code || res.Ready != (tc.code == 200) || !strings.HasPrefix(res.Sink, tc.sinkState) ||
			res.Database != "reachable" || res.Schema != atLatest {
			t.Errorf("%s: /readyz = %d %+v; want %d with sink %q", tc.name, code, res, tc.code, tc.sinkState)
		}
	}
	srv := serve(t, metrics.HandlerConfig{Gatherer: reg, Store: b.store})
	if code, body := get(t, srv, "/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	code, body := get(t, srv, "/metrics")
	if code != 200 || !strings.Contains(body, `outbox_relay_info{relay_id="r1",version="unknown"} 1`) {
		t.Errorf("/metrics = %d:\n%s", code, body)
	}
}

func TestReadyzSchemaBehind(t *testing.T) {
	t.Parallel()
	s, err := sqlite.Open(context.Background(), "sqlite://"+t.TempDir()+"/o.db", sqlite.Config{Table: storetest.TableName("behind")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	_, latest, err := s.MigrationVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, metrics.HandlerConfig{Store: s})
	code, body := get(t, srv, "/readyz")
	if code != 503 || !strings.Contains(body, fmt.Sprintf("behind: at version 0 of %d", latest)) || !strings.Contains(body, "outbox migrate") {
		t.Errorf("/readyz on an unmigrated table = %d %s", code, body)
	}
}

// TestReadyzHidesTheDSNPassword: a database that cannot be reached is
// reported without the password of its DSN, also without Redact.
func TestReadyzHidesTheDSNPassword(t *testing.T) {
	t.Parallel()
	const password = "s3cr3t-Pa55"
	cfg, err := pgxpool.ParseConfig("postgres://payments:" + password + "@127.0.0.1:1/pay?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg) // connects lazily
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := postgres.New(pool, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, metrics.HandlerConfig{Store: s, Timeout: 3 * time.Second})
	code, body := get(t, srv, "/readyz")
	if code != 503 || !strings.Contains(body, "unreachable") {
		t.Errorf("/readyz with the database down = %d %s", code, body)
	}
	if strings.Contains(body, password) {
		t.Errorf("/readyz shows the DSN password: %s", body)
	}
	_ = outbox.ErrInvalidConfig
}
