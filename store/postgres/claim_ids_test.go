package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/pgtest"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/storetest"
)

// ClaimIDs keeps the claim's per-aggregate rules: it never claims an event
// while an earlier unfinished one of its aggregate is neither in the call
// nor in the relay's own claims, it claims nothing in a lane another relay
// holds, a FAILED head holds its aggregate only under the blocking policy,
// and ids without a visible row come back as missing.
func TestClaimIDsKeepsAggregateOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	table := storetest.TableName("pg_ids")
	s, err := postgres.New(pool, postgres.Config{Table: table, NoNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), pgtest.DropTables(table)) })
	ids := map[string][]int64{}
	for _, agg := range []string{"a", "b", "c"} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		evs := make([]outbox.Event, 3)
		for i := range evs {
			evs[i] = outbox.Event{AggregateType: "payment", AggregateID: agg, EventType: "E", Payload: []byte(`{}`)}
		}
		if _, err := s.Enqueue(ctx, tx, evs...); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		rows, _ := pool.Query(ctx, fmt.Sprintf(`SELECT id FROM %q WHERE aggregate_id = $1 ORDER BY id`, table), agg)
		for rows.Next() {
			var id int64
			_ = rows.Scan(&id)
			ids[agg] = append(ids[agg], id)
		}
		rows.Close()
	}
	req := store.ClaimRequest{RelayID: "r", Limit: 100, Lease: time.Minute, FailedBlocks: true}
	claim := func(r store.ClaimRequest, offered ...int64) (*store.Claim, []int64) {
		t.Helper()
		c, missing, err := s.ClaimIDs(ctx, r, offered)
		if err != nil {
			t.Fatal(err)
		}
		return c, missing
	}
	got := func(c *store.Claim) []int64 {
		var out []int64
		for _, ev := range c.Events {
			out = append(out, ev.ID)
		}
		return out
	}
	a, b, c := ids["a"], ids["b"], ids["c"]

	if cl, _ := claim(req, a[1], a[2]); len(cl.Events) != 0 {
		t.Errorf("claimed %v while the aggregate's first event was not offered", got(cl))
	}
	first, _ := claim(req, a[0], a[1])
	if !slices.Equal(got(first), a[:2]) {
		t.Fatalf("claimed %v, want %v", got(first), a[:2])
	}
	if cl, _ := claim(req, a[2]); len(cl.Events) != 0 {
		t.Errorf("claimed %v behind another claim's events", got(cl))
	}
	own := req
	own.Own = []string{first.Token}
	if cl, _ := claim(own, a[2]); !slices.Equal(got(cl), a[2:]) {
		t.Errorf("with the first claim as its own: claimed %v, want %v", got(cl), a[2:])
	}

	// Another relay holds b's lane: nothing of b is claimed until it is
	// free again.
	lanes := fmt.Sprintf(`%q`, table+"_lanes")
	if _, err := pool.Exec(ctx, `UPDATE `+lanes+` SET owner = 'other', token = 42,
		lease_until_ms = (extract(epoch FROM now()) * 1000)::bigint + 3600000
		WHERE lane = (SELECT lane FROM `+fmt.Sprintf("%q", table)+` WHERE id = $1)`, b[0]); err != nil {
		t.Fatal(err)
	}
	if cl, _ := claim(req, b...); len(cl.Events) != 0 {
		t.Errorf("claimed %v in a lane another relay holds", got(cl))
	}
	if _, err := pool.Exec(ctx, `UPDATE `+lanes+` SET owner = NULL, token = NULL, lease_until_ms = 0 WHERE owner = 'other'`); err != nil {
		t.Fatal(err)
	}
	// The relay takes the lane at its next balance of leases.
	wait.Until(t, 10*time.Second, "the relay to take the free lane and claim b", func() (bool, error) {
		cl, _ := claim(req, b...)
		if len(cl.Events) > 0 && !slices.Equal(got(cl), b) {
			t.Fatalf("once the lane is free: claimed %v, want %v", got(cl), b)
		}
		return len(cl.Events) > 0, nil
	})

	// A FAILED head holds its aggregate only under the blocking policy.
	if _, err := pool.Exec(ctx, fmt.Sprintf(`UPDATE %q SET status = 'FAILED', hold = 2 WHERE id = $1`, table), c[0]); err != nil {
		t.Fatal(err)
	}
	if cl, _ := claim(req, c[1]); len(cl.Events) != 0 {
		t.Errorf("claimed %v behind a FAILED event under the blocking policy", got(cl))
	}
	// ... which moved the events waiting behind it to BLOCKED; under the
	// continue policy the sweeper releases them, and they are claimed.
	r, err := s.GetEvent(ctx, eventID(t, pool, table, c[1]))
	if err != nil || r.Status != outbox.StatusBlocked {
		t.Fatalf("the event behind the FAILED head is %s (%v), want BLOCKED", r.Status, err)
	}
	cont := req
	cont.FailedBlocks = false
	if _, err := s.Sweep(ctx, store.SweepRequest{FailedBlocks: false}); err != nil {
		t.Fatal(err)
	}
	if cl, _ := claim(cont, c[1]); !slices.Equal(got(cl), c[1:2]) {
		t.Errorf("continue policy: claimed %v, want %v", got(cl), c[1:2])
	}

	if cl, missing := claim(req, 1<<50); len(cl.Events) != 0 || !slices.Equal(missing, []int64{1 << 50}) {
		t.Errorf("an id without a row: claimed %v, missing %v", got(cl), missing)
	}
}

// eventID reads the event id of row id of table.
func eventID(t *testing.T, pool *pgxpool.Pool, table string, id int64) outbox.EventID {
	t.Helper()
	var raw [16]byte
	if err := pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT event_id FROM %q WHERE id = $1`, table), id).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	return outbox.EventID(raw)
}
