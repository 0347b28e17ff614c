package metrics

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/store"
)

// HandlerConfig configures the endpoints that Mount adds.
type HandlerConfig struct {
	// Gatherer serves /metrics, usually the registry given to New as
	// Registerer. nil: /metrics is not mounted.
	Gatherer prometheus.Gatherer
	// Store is checked by /readyz: reachable, and its schema at the latest
	// migration. Required for /readyz.
	Store store.Store
	// Sink is checked by /readyz when it reports its reachability (a
	// Reachable() (ok bool, lastErr error, since time.Time) method);
	// otherwise its state is "unknown". nil: "unknown".
	Sink sink.Sink
	// Redact scrubs error texts before /readyz shows them (the CLI passes
	// its secret scrubber). nil: error texts are shown as the store and
	// the sink word them, which never includes a password.
	Redact func(string) string
	// Timeout bounds the database checks of one /readyz request. Default 2s.
	Timeout time.Duration
}

// sinkHealth is the optional interface of sinks that know whether they
// reach their destination.
type sinkHealth interface {
	Reachable() (ok bool, lastErr error, since time.Time)
}

// Mount adds to mux:
//
//   - GET /metrics: the Prometheus text format of cfg.Gatherer;
//   - GET /healthz: 200 "ok" while the process serves requests;
//   - GET /readyz: 200 when the database is reachable, the schema is at the
//     latest migration and the sink has been reached at least once or is
//     known to be down (or does not say); 503 otherwise. The JSON body says
//     which check failed.
//
// The handlers have no authentication: bind them to a private address.
func Mount(mux *http.ServeMux, cfg HandlerConfig) {
	if cfg.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	if cfg.Store != nil {
		mux.Handle("GET /readyz", readiness{cfg})
	}
}

// Readiness is the body of /readyz.
type Readiness struct {
	Ready bool `json:"ready"`
	// Database is "reachable" or "unreachable: <error>".
	Database string `json:"database"`
	// Schema is "at version N of N", "behind: ..." or "unknown".
	Schema string `json:"schema"`
	// Sink is "reached", "down since <time>: <error>", "not reached yet"
	// or "unknown (...)".
	Sink string `json:"sink"`
}

type readiness struct{ cfg HandlerConfig }

func (h readiness) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	timeout := h.cfg.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	res := Check(ctx, h.cfg.Store, h.cfg.Sink)
	if h.cfg.Redact != nil {
		res.Database, res.Schema, res.Sink = h.cfg.Redact(res.Database), h.cfg.Redact(res.Schema), h.cfg.Redact(res.Sink)
	}
	w.Header().Set("Content-Type", "application/json")
	if !res.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(res)
}

// Check runs the readiness checks of /readyz.
func Check(ctx context.Context, st store.Store, sk sink.Sink) Readiness {
	res := Readiness{Ready: true, Database: "reachable", Schema: "unknown"}
	cur, latest, err := st.MigrationVersion(ctx)
	switch {
	case err != nil:
		res.Ready, res.Database = false, "unreachable: "+err.Error()
	case cur < latest:
		res.Ready, res.Schema = false, fmt.Sprintf("behind: at version %d of %d; run `outbox migrate`", cur, latest)
	default:
		res.Schema = fmt.Sprintf("at version %d of %d", cur, latest)
	}
	h, ok := sk.(sinkHealth)
	if !ok {
		res.Sink = "unknown (the sink does not report whether it reaches its destination)"
		return res
	}
	up, lastErr, since := h.Reachable()
	switch {
	case up:
		res.Sink = "reached"
	case lastErr != nil:
		res.Sink = fmt.Sprintf("down since %s: %v", since.UTC().Format(time.RFC3339), lastErr)
	default:
		res.Ready, res.Sink = false, "not reached yet"
	}
	return res
}
