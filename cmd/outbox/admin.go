package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/metrics"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/store"
)

// adminServer is the listener of `relay --admin` and `outbox admin`: a mux
// the CLI owns, so that more handlers (metrics, health, the admin API) can
// be mounted on the one address. Mount them with mountHealth and
// mountAdminAPI, so that the start log line lists what is served.
type adminServer struct {
	mux  *http.ServeMux
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
	log  *slog.Logger

	health, api bool // what is mounted
}

// mountHealth mounts /metrics, /healthz and /readyz.
func (a *adminServer) mountHealth(cfg metrics.HandlerConfig) {
	metrics.Mount(a.mux, cfg)
	a.health = true
}

// mountAdminAPI mounts the admin API and its web UI on "/": /metrics,
// /healthz and /readyz, when mounted too, are more specific and win.
func (a *adminServer) mountAdminAPI(h http.Handler) {
	a.mux.Handle("/", h)
	a.api = true
}

// servedPaths lists what the server serves, for its start log line.
func (a *adminServer) servedPaths() string {
	var paths []string
	if a.health {
		paths = append(paths, "/metrics", "/healthz", "/readyz")
	}
	if a.api {
		paths = append(paths, "/api/v1/", "/ (web UI)")
	}
	return strings.Join(paths, " ")
}

// listenAdmin binds addr (host:port) or returns a one-line error that says
// what to fix. Nothing is served until serve.
func listenAdmin(addr string, log *slog.Logger) (*adminServer, error) {
	return listenAdminAuth(addr, log, false)
}

// listenAdminAuth is listenAdmin; authenticated says that everything served
// there needs a token (`outbox admin`), so that listening beyond this
// machine is no reason for a warning.
func listenAdminAuth(addr string, log *slog.Logger, authenticated bool) (*adminServer, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: --admin %q is not host:port: use e.g. 127.0.0.1:9464", outbox.ErrInvalidConfig, addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return nil, fmt.Errorf("%w: --admin %q: port %q is not a number from 0 to 65535", outbox.ErrInvalidConfig, addr, port)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		switch {
		case errors.Is(err, syscall.EADDRINUSE):
			return nil, fmt.Errorf("--admin %s: the address is already in use: stop the other process or choose another port", addr)
		case errors.Is(err, syscall.EADDRNOTAVAIL):
			return nil, fmt.Errorf("--admin %s: %q is not an address of this machine", addr, host)
		case errors.Is(err, syscall.EACCES):
			return nil, fmt.Errorf("--admin %s: not allowed to listen there (ports below 1024 need privileges)", addr)
		}
		return nil, fmt.Errorf("--admin %s: cannot listen: %w", addr, err)
	}
	if !loopback(host) && !authenticated {
		log.Warn("the admin endpoint has no authentication and listens beyond this machine: bind it to 127.0.0.1 or protect it with a firewall or proxy",
			"addr", ln.Addr().String())
	}
	return &adminServer{mux: http.NewServeMux(), ln: ln, done: make(chan struct{}), log: log}, nil
}

// loopback reports whether host names only this machine.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serve starts serving the mux.
func (a *adminServer) serve() {
	a.srv = &http.Server{Handler: a.mux, ReadHeaderTimeout: 5 * time.Second}
	a.log.Info("admin endpoint listening", "addr", a.ln.Addr().String(), "paths", a.servedPaths())
	go func() {
		defer close(a.done)
		if err := a.srv.Serve(a.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("admin endpoint stopped", "err", err)
		}
	}()
}

// close stops serving (letting requests in progress finish for a moment)
// and releases the address.
func (a *adminServer) close() {
	if a.srv == nil {
		a.ln.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := a.srv.Shutdown(ctx); err != nil {
		a.srv.Close()
	}
	<-a.done
}

// startAdminEndpoints mounts /metrics, /healthz and /readyz on admin,
// starts serving, and starts refreshing the cluster-wide gauges; stop ends
// the refresh.
func (c *RelayCmd) startAdminEndpoints(ctx context.Context, g *Globals, admin *adminServer, b *backend, sk sink.Sink,
	policy relay.FailurePolicy) (m *metrics.Metrics, stop func(), err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(c.extraCollectors...)
	m, err = metrics.New(metrics.Config{Registerer: reg, RelayID: c.RelayID, Version: version, Store: b.store,
		OnFailure: policy, GaugeInterval: c.GaugeInterval, Logger: g.logger})
	if err != nil {
		return nil, nil, err
	}
	admin.mountHealth(metrics.HandlerConfig{Gatherer: reg, Store: b.store, Sink: sk, Redact: g.secrets.redact})
	admin.serve()
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.RunGauges(gctx)
	}()
	return m, func() { cancel(); <-done }, nil
}

// benchAdmin is what `outbox bench --admin` runs beside each relay: the
// endpoints of --admin on a loopback port, the gauges refreshed every
// second, and a scraper reading /metrics every second.
func benchAdmin(log *slog.Logger) func(ctx context.Context, st store.Store) (relay.Observer, func()) {
	return func(ctx context.Context, st store.Store) (relay.Observer, func()) {
		admin, err := listenAdmin("127.0.0.1:0", log)
		if err != nil {
			log.Warn("bench: no admin endpoint", "err", err)
			return nil, func() {}
		}
		reg := prometheus.NewRegistry()
		m, err := metrics.New(metrics.Config{Registerer: reg, RelayID: "bench", Version: version, Store: st,
			GaugeInterval: time.Second, Logger: log})
		if err != nil {
			admin.close()
			log.Warn("bench: no metrics", "err", err)
			return nil, func() {}
		}
		admin.mountHealth(metrics.HandlerConfig{Gatherer: reg, Store: st})
		admin.serve()
		ctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); m.RunGauges(ctx) }()
		go func() {
			defer wg.Done()
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				if resp, err := http.Get("http://" + admin.ln.Addr().String() + "/metrics"); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
		return m, func() { cancel(); wg.Wait(); admin.close() }
	}
}
