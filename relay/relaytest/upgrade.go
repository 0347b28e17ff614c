package relaytest

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/storetest"
)

// UpgradeHarness adapts one backend to RunUpgradeFromV1.
type UpgradeHarness struct {
	// Store is on Table, whose schema is at version 1 (MigrateUpTo(1)).
	Store store.Store
	DB    *sql.DB
	Table string
	// Bind rewrites ? placeholders ($1 ... on PostgreSQL); nil keeps them.
	Bind func(string) string
	// InsertV1 writes one row of the version-1 table, with placeholders
	// for event_id (canonical UUID text), aggregate_id and status, and a
	// locked_until in the past (so that a PROCESSING row is reaped).
	InsertV1 string
	// BeforeUpgrade, when set, runs after the rows are written and
	// before MigrateUp.
	BeforeUpgrade func(ctx context.Context) error
	// MigrateUp applies the remaining migrations.
	MigrateUp func(ctx context.Context) error
}

// v1Rows are the rows of the upgrade test, in id order: every state an
// unfinished or finished event can be in, over four aggregates.
var v1Rows = []struct {
	agg     string
	status  outbox.Status
	wantSeq int64 // 0: no number (a finished event)
}{
	{"up-a", outbox.StatusProcessed, 0},
	{"up-a", outbox.StatusPending, 1},
	{"up-b", outbox.StatusFailed, 1},
	{"up-a", outbox.StatusPending, 2},
	{"up-b", outbox.StatusBlocked, 2},
	{"up-c", outbox.StatusProcessing, 1},
	{"up-d", outbox.StatusProcessed, 0},
	{"up-a", outbox.StatusExpired, 0},
	{"up-c", outbox.StatusPending, 2},
}

// RunUpgradeFromV1 fills a version-1 outbox table with rows in every
// state, applies the later migrations and checks: every row is kept with
// its id, status and payload; the unfinished rows are numbered 1, 2, 3 ...
// in id order per aggregate, the finished ones are not; new events
// continue each aggregate's numbers; and a relay then delivers the
// PENDING rows, the reaped PROCESSING row and the new events, in order and
// with their numbers, while the FAILED aggregate stays held.
func RunUpgradeFromV1(t *testing.T, h UpgradeHarness) {
	ctx := context.Background()
	bind := func(q string) string {
		if h.Bind != nil {
			return h.Bind(q)
		}
		return q
	}
	eventIDs := make([]outbox.EventID, len(v1Rows))
	for i, r := range v1Rows {
		eventIDs[i] = outbox.NewEventID()
		if _, err := h.DB.ExecContext(ctx, bind(h.InsertV1), eventIDs[i].String(), r.agg, string(r.status)); err != nil {
			t.Fatalf("version-1 row %d: %v", i, err)
		}
	}
	if h.BeforeUpgrade != nil {
		if err := h.BeforeUpgrade(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.MigrateUp(ctx); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	rows, err := h.DB.QueryContext(ctx, "SELECT id, event_id, aggregate_id, status, aggregate_seq FROM "+h.Table+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	i := 0
	for rows.Next() {
		var (
			id                 int64
			eventID, agg, stat string
			seq                sql.NullInt64
		)
		if err := rows.Scan(&id, &eventID, &agg, &stat, &seq); err != nil {
			t.Fatal(err)
		}
		if i >= len(v1Rows) {
			t.Fatalf("more rows after the upgrade than before: id %d", id)
		}
		w := v1Rows[i]
		if eventID != eventIDs[i].String() || agg != w.agg || stat != string(w.status) || seq.Int64 != w.wantSeq {
			t.Errorf("row %d after the upgrade: event %s, %s, %s, seq %v; want event %s, %s, %s, seq %d",
				i, eventID, agg, stat, seq, eventIDs[i], w.agg, w.status, w.wantSeq)
		}
		ids = append(ids, id)
		i++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if i != len(v1Rows) {
		t.Fatalf("%d rows after the upgrade, want the %d written before", i, len(v1Rows))
	}

	// New events continue the numbers: up-a had 2 unfinished rows, up-d none.
	insert := bind("INSERT INTO " + h.Table + " (aggregate_type, aggregate_id, event_type, payload) VALUES (?, ?, ?, ?)")
	for _, agg := range []string{"up-a", "up-d"} {
		if _, err := h.DB.ExecContext(ctx, insert, "payment", agg, "AfterUpgrade", `{"new":true}`); err != nil {
			t.Fatalf("plain INSERT after the upgrade: %v", err)
		}
	}

	rec := &Recorder{Name: "sink"}
	cfg := testConfig(&storetest.Harness{Store: h.Store}, rec, "upgrade")
	// The PROCESSING row's lease ended before the upgrade. The relay's
	// own lease is 10 s: a claim gets half of it, and on a busy machine a
	// claim on MariaDB under a lease of 1 s or less can time out every
	// time.
	cfg.Lease = 10 * time.Second
	drain(t, newRelay(t, cfg), 3*time.Minute)
	got := map[string][]int64{}
	for _, d := range rec.Deliveries() {
		got[d.Key] = append(got[d.Key], d.Seq)
	}
	want := map[string][]int64{"payment\x00up-a": {1, 2, 3}, "payment\x00up-c": {1, 2}, "payment\x00up-d": {1}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("delivered sequences after the upgrade %v, want %v (up-b stays behind its FAILED event)", got, want)
	}
}
