package main

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/txoutbox/outbox/metrics"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/store"
)

// fanOutMetrics are the metrics of a relay with a destinations file, on
// --admin: one set per relay of the process, in one registry, each with
// the label destination (the destination's name; empty for the router's,
// the outbox table's), with the gauges of its own table.
type fanOutMetrics struct {
	c      *RelayCmd
	g      *Globals
	admin  *adminServer
	outbox store.Store
	reg    *prometheus.Registry
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (c *RelayCmd) newFanOutMetrics(g *Globals, admin *adminServer, outboxStore store.Store) *fanOutMetrics {
	m := &fanOutMetrics{c: c, g: g, admin: admin, outbox: outboxStore, cancel: func() {}}
	if admin != nil {
		m.reg = prometheus.NewRegistry()
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// add registers the metrics of one relay (destination "" for the router)
// and starts refreshing its table's gauges; it returns the relay's
// observer, nil without --admin.
func (m *fanOutMetrics) add(ctx context.Context, destination string, st store.Store) (relay.Observer, error) {
	if m.reg == nil {
		return nil, nil
	}
	policy, err := relay.ParseFailurePolicy(m.c.OnFailure)
	if err != nil {
		return nil, err
	}
	met, err := metrics.New(metrics.Config{
		Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"destination": destination}, m.reg),
		RelayID:    m.c.RelayID, Version: version, Store: st,
		OnFailure: policy, GaugeInterval: m.c.GaugeInterval, Logger: m.g.logger,
	})
	if err != nil {
		return nil, err
	}
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	prev := m.cancel
	m.cancel = func() { prev(); cancel() }
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		met.RunGauges(gctx)
	}()
	return met, nil
}

// collect registers collectors of the process as they are, without the
// destination label (the CDC source's).
func (m *fanOutMetrics) collect(cs ...prometheus.Collector) {
	if m.reg != nil {
		m.reg.MustRegister(cs...)
	}
}

// serve mounts /metrics, /healthz and /readyz (the outbox table's) and
// starts serving.
func (m *fanOutMetrics) serve() {
	if m.admin == nil {
		return
	}
	m.admin.mountHealth(metrics.HandlerConfig{Gatherer: m.reg, Store: m.outbox, Redact: m.g.secrets.redact})
	m.admin.serve()
}

// stop ends the gauges' refresh.
func (m *fanOutMetrics) stop() {
	m.cancel()
	m.wg.Wait()
}
