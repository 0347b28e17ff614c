package main

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txoutbox/outbox/metrics"
)

// TestAdminStartLineListsWhatIsServed: the start log line of the admin
// listener names the paths mounted on it: the health endpoints of
// `relay --admin`, the admin API of `outbox admin`, or both.
func TestAdminStartLineListsWhatIsServed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		health, api bool
		want        string
	}{
		{true, false, `paths="/metrics /healthz /readyz"`},
		{false, true, `paths="/api/v1/ / (web UI)"`},
		{true, true, `paths="/metrics /healthz /readyz /api/v1/ / (web UI)"`},
	} {
		var logged bytes.Buffer // written by serve, before it returns
		srv, err := listenAdmin("127.0.0.1:0", slog.New(slog.NewTextHandler(&logged, nil)))
		if err != nil {
			t.Fatal(err)
		}
		if tc.health {
			srv.mountHealth(metrics.HandlerConfig{Gatherer: prometheus.NewRegistry()})
		}
		if tc.api {
			srv.mountAdminAPI(http.NotFoundHandler())
		}
		srv.serve()
		srv.close()
		if line := logged.String(); !strings.Contains(line, `msg="admin endpoint listening"`) || !strings.Contains(line, tc.want+"\n") {
			t.Errorf("health %v, admin API %v: start log line %q, want it to end with %s", tc.health, tc.api, line, tc.want)
		}
	}
}
