package sqladmin

import (
	"embed"
	"fmt"

	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store/internal/dialect"
)

// statements are the admin queries of sql/statements.sql, parsed once.
//
//go:embed sql/*.sql
var sqlFiles embed.FS

var statements = sqltext.MustParseFS(sqlFiles, "sql/*.sql")

// names is what a statement renders with: the dialect's quote and
// fragments, the tables, and per call the fixed fragments of a filter
// (a column prefix, a list of placeholders).
type names struct {
	d dialect.Dialect
	s Schema
	// Q is the identifier quote; Outbox, Relays and Attempts the tables.
	Q, Outbox, Relays, Attempts string
	// Now is the dialect's clock.
	Now string
	// DeliveredOnRow, Held and Deliveries: see Schema; Integer: see
	// dialect.Dialect.
	DeliveredOnRow bool
	Integer, Held  string
	Deliveries     string
	// Pre prefixes the summary columns with a table alias ("f.").
	Pre string
	// IDs is a list of placeholders.
	IDs string
}

// P renders the n-th placeholder.
func (n names) P(i int) string { return n.d.P(i) }

// Upsert renders the head of the heartbeat's update clause on key.
func (n names) Upsert(key string) string { return n.d.Upsert(key) }

// Inserted renders the inserted value of column col in the upsert.
func (n names) Inserted(col string) string { return n.d.Inserted(col) }

// Status renders the status of a row (with the column prefix pre): the
// status column, or PROCESSING for a PENDING row a claim holds.
func (n names) Status(pre string) string {
	if n.s.Claimed == "" {
		return pre + "status"
	}
	return "CASE WHEN " + pre + "status = 'PENDING' AND " + fmt.Sprintf(n.s.Claimed, pre+"id") +
		" THEN 'PROCESSING' ELSE " + pre + "status END"
}

// Ago renders the database clock minus the microseconds in placeholder i.
func (n names) Ago(i int) string { return n.d.Ago(n.d.P(i)) }

// Text renders a UUID column as text.
func (n names) Text(col string) string { return n.d.Text(col) }

// Minute renders a stored time truncated to the minute.
func (n names) Minute(col string) string { return n.d.Minute(col) }

// Prefixed is n with the summary columns prefixed by alias.
func (n names) Prefixed(alias string) names {
	n.Pre = alias
	return n
}

// rendered are the statements rendered once for a store's tables.
type rendered struct {
	events, match, failed, chainHeads, chainCount, chainEvents   string
	throughput, publishDurations, relays, heartbeat, removeRelay string
}

func render(n names) rendered {
	r := func(name string) string { return statements.MustRenderNamed("statements."+name, n) }
	return rendered{
		events: r("events"), match: r("match"), failed: r("failed"),
		chainHeads: r("chain_heads"), chainCount: r("chain_count"), chainEvents: r("chain_events"),
		throughput: r("throughput"), publishDurations: r("publish_durations"), relays: r("relays"), heartbeat: r("heartbeat"), removeRelay: r("remove_relay"),
	}
}
