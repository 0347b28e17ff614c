package main

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/postgres/cdc"
)

// cdcFlags are the relay's flags naming the slot and publication of
// --source logical.
type cdcFlags struct {
	Slot        string `help:"Logical replication slot of --source logical (default <table>_slot)." env:"OUTBOX_SLOT" placeholder:"NAME"`
	Publication string `help:"Publication of the outbox table's inserts for --source logical (default <table>_publication)." env:"OUTBOX_PUBLICATION" placeholder:"NAME"`
}

// cdcNames are the same flags for status and migrate, without variables
// (a setting meant for the relay never changes what those commands drop).
type cdcNames struct {
	Slot        string `help:"Logical replication slot of --source logical (default <table>_slot)." placeholder:"NAME"`
	Publication string `help:"Publication of --source logical (default <table>_publication)." placeholder:"NAME"`
}

func (n cdcNames) flags() cdcFlags { return cdcFlags{Slot: n.Slot, Publication: n.Publication} }

func (f cdcFlags) names(table string) (slot, publication string) {
	slot, publication = f.Slot, f.Publication
	if slot == "" {
		slot = table + "_slot"
	}
	if publication == "" {
		publication = table + "_publication"
	}
	return slot, publication
}

// openLogicalSource wraps the PostgreSQL store of b in a logical
// replication source (--source logical).
func (c *RelayCmd) openLogicalSource(ctx context.Context, g *Globals, b *backend) (*cdc.Source, error) {
	pg, ok := b.store.(*postgres.Store)
	if !ok {
		return nil, fmt.Errorf("%w: --source logical needs PostgreSQL, not %s: use --source poll", outbox.ErrInvalidConfig, b.kind)
	}
	slot, pub := c.cdcFlags.names(g.Table)
	return cdc.New(ctx, pg, cdc.Config{
		Slot:         slot,
		Publication:  pub,
		PollInterval: c.SafetyPoll,
		Lease:        c.StreamLease,
		HolderID:     c.RelayID,
		Logger:       g.logger,
	})
}

// slotLagGauge is outbox_cdc_slot_lag_bytes for --admin.
func slotLagGauge(src *cdc.Source) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "outbox_cdc_slot_lag_bytes",
		Help:        "WAL the logical replication slot of --source logical holds back: the server's WAL position minus the slot's confirmed position, read every second.",
		ConstLabels: prometheus.Labels{"slot": src.Slot()},
	}, func() float64 {
		n, _ := src.SlotLagBytes()
		return float64(n)
	})
}

// slotRecreationsCounter is outbox_cdc_slot_recreations_total for --admin.
func slotRecreationsCounter(src *cdc.Source) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name:        "outbox_cdc_slot_recreations_total",
		Help:        "Times the relay dropped the logical replication slot of --source logical and created it again at the current position because PostgreSQL could not decode its WAL; the events committed between came by the safety-net poll.",
		ConstLabels: prometheus.Labels{"slot": src.Slot()},
	}, func() float64 { return float64(src.SlotRecreations()) })
}

// dropLogical removes the slot and the publication (migrate --down).
func dropLogical(ctx context.Context, b *backend, f cdcFlags, table string) error {
	pg, ok := b.store.(*postgres.Store)
	if !ok {
		return nil
	}
	slot, pub := f.names(table)
	return cdc.Drop(ctx, pg.Pool(), slot, pub)
}

// slotLag reads the slot's lag for `outbox status`; ok is false when the
// backend is not PostgreSQL or the slot does not exist.
func slotLag(ctx context.Context, st store.Store, f cdcFlags, table string) (cdc.SlotLag, bool, error) {
	pg, ok := st.(*postgres.Store)
	if !ok {
		return cdc.SlotLag{}, false, nil
	}
	slot, _ := f.names(table)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := cdc.Lag(cctx, pg.Pool(), slot)
	if err != nil {
		return l, false, err
	}
	return l, l.Exists, nil
}
