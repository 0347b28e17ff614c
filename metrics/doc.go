// Package metrics exports a relay's work as Prometheus metrics and serves
// the health endpoints. It implements relay.Observer; the relay and the
// root package import no metrics library.
//
//	reg := prometheus.NewRegistry()
//	m, err := metrics.New(metrics.Config{Registerer: reg, RelayID: id, Store: st})
//	r, err := relay.New(relay.Config{RelayID: id, Store: st, Sink: sk, Observer: m})
//	go m.RunGauges(ctx)                                // the cluster-wide gauges
//	metrics.Mount(mux, metrics.HandlerConfig{Gatherer: reg, Store: st, Sink: sk})
//
// What it guarantees:
//
//   - The metric names and labels below are the interface; they change only
//     with a major version. Labels are bounded: route (capped at
//     Config.MaxRoutes, then "other"), outcome, op and status. Never an
//     event id, an aggregate id, a payload or a credential.
//   - Counters and histograms count what this relay did:
//     outbox_deliveries_total{route,outcome}, outbox_lease_lost_total,
//     outbox_store_errors_total{op}, outbox_publish_duration_seconds{route},
//     outbox_delivery_lag_seconds{route} (commit to recorded delivery, both
//     on the database clock), outbox_deadline_margin_seconds{route},
//     outbox_claim_duration_seconds, outbox_complete_duration_seconds.
//   - The gauges outbox_events{status}, outbox_oldest_due_pending_age_seconds,
//     outbox_blocked_aggregates and outbox_dead_letters are cluster-wide:
//     read in SQL from one consistent store.Snapshot, so they agree with each
//     other and with `outbox status`. Only the relay that holds the store's
//     gauge lease refreshes and exports them (outbox_gauges_leader 1), at
//     most once per Config.GaugeInterval, so the database does that work
//     once per interval however many relays run, and sum() over the relays
//     is right. A failed refresh removes the gauges rather than leaving
//     stale figures.
//   - outbox_relay_info{relay_id,version} is 1 in every running relay.
package metrics
