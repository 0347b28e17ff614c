package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/destconfig"
	"github.com/txoutbox/outbox/internal/fanout"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/store"
)

// The demo's two destinations, as named in its destinations file.
const (
	destGateway = "gateway"
	destKafka   = "kafka"
)

// destinationsFile is the demo's destinations file (docs/DESTINATIONS.md)
// for the relay named relay: the approval requests go to the gateway over
// HTTP and to Kafka; the payment and merchant events to Kafka only; the
// receipts of incident 6 to the gateway only.
func (d *demoRun) destinationsFile(relay string) string {
	t := d.plan.relay
	return fmt.Sprintf(`destinations:
  %s: { url: %q }
  %s:   { url: %q }
routes:
  - match: { event_type: ApprovalRequested }
    to: [%s, %s]
  - match: { aggregate_type: receipt }
    to: [%s]
  - match: { aggregate_type: [payment, merchant] }
    to: [%s]
`, destGateway, d.gw.EventsURL(relay)+"&timeout="+t.httpTimeout.String(),
		destKafka, "kafka://"+d.kafka.Addr()+"?produce_timeout="+t.kafkaTimeout.String()+"&client_id="+relay,
		destGateway, destKafka, destGateway, destKafka)
}

// setupFanOut starts the Kafka broker, writes the destinations files of
// both relays, and creates each destination's table with the store's
// migrations (an ordinary outbox table, one per destination).
func (d *demoRun) setupFanOut(ctx context.Context) error {
	k, err := StartKafka()
	if err != nil {
		return err
	}
	d.kafka = k
	if d.confDir, err = os.MkdirTemp("", "outbox-demo-config-"); err != nil {
		return fmt.Errorf("make a temporary folder for the demo's destinations file: %w", err)
	}
	for _, r := range []string{"relay-1", "relay-2"} {
		path := filepath.Join(d.confDir, "destinations-"+r+".yaml")
		text := d.destinationsFile(r)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			return fmt.Errorf("write the demo's destinations file %s: %w", path, err)
		}
		cfg, err := destconfig.Parse(path, []byte(text))
		if err != nil {
			return fmt.Errorf("the demo's destinations file %s: %w", path, err)
		}
		if r == "relay-1" {
			d.cfg, d.cfgText = cfg, text
		} else {
			d.cfg2File = path
		}
	}
	tables, err := d.cfg.Tables(d.table)
	if err != nil {
		return err
	}
	for _, name := range []string{destGateway, destKafka} {
		b, err := d.env.OpenBackend(ctx, d.dsn, tables[name])
		if err != nil {
			return fmt.Errorf("destination %s: %w", name, err)
		}
		d.dests = append(d.dests, destTable{name: name, table: tables[name], b: b})
		if _, err := b.Store.MigrateUp(ctx); err != nil {
			return fmt.Errorf("create the table %s of destination %s: %w", tables[name], name, err)
		}
	}
	return nil
}

// destTable is a destination's outbox table and its store.
type destTable struct {
	name, table string
	b           *Backend
}

// dest returns the destination table of name.
func (d *demoRun) dest(name string) destTable {
	for _, t := range d.dests {
		if t.name == name {
			return t
		}
	}
	return destTable{}
}

// gwStore is the gateway's table: where each approval's delivery to the
// gateway is recorded.
func (d *demoRun) gwStore() store.Store { return d.dest(destGateway).b.Store }

// kStore is Kafka's table.
func (d *demoRun) kStore() store.Store { return d.dest(destKafka).b.Store }

// allStores are the outbox table's store, then the destination tables'.
func (d *demoRun) allStores() []store.Store {
	out := []store.Store{d.b.Store}
	for _, t := range d.dests {
		out = append(out, t.b.Store)
	}
	return out
}

// routedTo reports whether the file routes events of these types to dest.
func (d *demoRun) routedTo(dest, eventType, aggregateType string) bool {
	to, _ := d.cfg.Resolve(eventType, aggregateType)
	for _, n := range to {
		if n == dest {
			return true
		}
	}
	return false
}

// fanOutConfigs returns relay-1's relays: the router on the outbox table
// (cfgs[0]), whose sink copies each event into its destinations' tables,
// then one relay per destination table with that destination's sink, each
// from base. It opens the sinks; the caller closes them.
func (d *demoRun) fanOutConfigs(ctx context.Context, base relay.Config) ([]relay.Config, error) {
	var cfgs []relay.Config
	var fd []fanout.Destination
	for _, dc := range d.cfg.Destinations {
		t := d.dest(dc.Name)
		sk, err := d.env.OpenSink(ctx, dc.URL, base.Logger.With("destination", dc.Name))
		if err != nil {
			closeSinks(ctx, cfgs)
			return nil, fmt.Errorf("destination %s: %w", dc.Name, err)
		}
		c := base
		c.Store, c.Sink = t.b.Store, sk
		c.Logger = base.Logger.With("destination", dc.Name)
		cfgs = append(cfgs, c)
		fd = append(fd, fanout.Destination{Name: dc.Name, Table: t.table, Store: t.b.Store})
	}
	router, err := fanout.NewRouter(d.cfg, d.table, fd)
	if err != nil {
		closeSinks(ctx, cfgs)
		return nil, err
	}
	rc := base
	rc.Store, rc.Sink = d.b.Store, router
	rc.Logger = base.Logger.With("stage", "router")
	return append([]relay.Config{rc}, cfgs...), nil
}

func closeSinks(ctx context.Context, cfgs []relay.Config) {
	for _, c := range cfgs {
		_ = c.Sink.Close(ctx)
	}
}

// cleanupFanOut drops the destination tables (unless kept), closes their
// stores, stops Kafka and removes the destinations files.
func (d *demoRun) cleanupFanOut(ctx context.Context, drop bool) {
	for _, t := range d.dests {
		if drop {
			if err := t.b.Store.MigrateDown(ctx); err != nil {
				d.env.Logger.Warn("drop the demo's destination table", "table", t.table, "err", err)
			}
			if tt, err := store.TablesFor(t.table); err == nil && d.bdb != nil {
				if err := d.bdb.dropTable(ctx, tt.Migrations); err != nil {
					d.env.Logger.Warn("drop the demo's migration table", "table", tt.Migrations, "err", err)
				}
			}
		}
		t.b.Close()
	}
	d.dests = nil
	if d.kafka != nil {
		d.kafka.Close()
	}
	if d.confDir != "" && !d.c.Keep {
		_ = os.RemoveAll(d.confDir)
	}
}

// destinationsHeader is the header's lines on Kafka and the
// destinations file.
func (d *demoRun) destinationsHeader() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  kafka     in-process Kafka-protocol broker at %s: topics %s (the kafka sink's {aggregate_type}.events)\n",
		d.kafka.Addr(), strings.Join(kafkaTopics, ", "))
	fmt.Fprintf(&b, "  fan-out   ONE outbox table, two destinations, each with a table of its own (%s, %s); relay-1's destinations file:\n",
		d.dest(destGateway).table, d.dest(destKafka).table)
	for _, l := range strings.Split(strings.TrimRight(d.env.Redact(d.cfgText), "\n"), "\n") {
		fmt.Fprintf(&b, "              %s\n", l)
	}
	fmt.Fprintf(&b, "            (relay-2's is the same with relay=relay-2: %s)\n", d.cfg2File)
	return b.String()
}

// notInOutbox reports whether err says the event is not in the table.
func notInOutbox(err error) bool { return errors.Is(err, outbox.ErrNotFound) }
