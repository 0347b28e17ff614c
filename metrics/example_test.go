package metrics_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txoutbox/outbox/metrics"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink/discard"
	"github.com/txoutbox/outbox/store/sqlite"
)

// A relay embedded in a service, with its metrics on the service's own
// registry and mux.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "outbox-example")
	defer os.RemoveAll(dir)
	st, _ := sqlite.Open(ctx, "sqlite://"+filepath.Join(dir, "outbox.db"), sqlite.Config{})
	defer st.Close()
	_, _ = st.MigrateUp(ctx)

	reg := prometheus.NewRegistry()
	id := relay.NewRelayID()
	m, err := metrics.New(metrics.Config{Registerer: reg, RelayID: id, Version: "v1.2.3", Store: st})
	if err != nil {
		panic(err)
	}
	sk := discard.New()
	r, _ := relay.New(relay.Config{RelayID: id, Store: st, Sink: sk, Observer: m})
	_ = r // go r.Run(ctx); go m.RunGauges(ctx)

	mux := http.NewServeMux()
	metrics.Mount(mux, metrics.HandlerConfig{Gatherer: reg, Store: st, Sink: sk})
	for _, path := range []string{"/healthz", "/readyz"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		fmt.Print(rec.Code, " ", rec.Body.String())
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	fmt.Println(strings.Contains(rec.Body.String(), `outbox_relay_info{relay_id="`+id+`",version="v1.2.3"} 1`))
	// Output:
	// 200 ok
	// 200 {"ready":true,"database":"reachable","schema":"at version 4 of 4","sink":"reached"}
	// true
}
