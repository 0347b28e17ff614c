package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/storetest"
)

// ClaimIDs keeps the claim's per-aggregate rules: it never claims an event
// while an earlier unfinished one of its aggregate is neither in the call
// nor in the relay's own claims, it stops an aggregate at a row another
// transaction holds, a FAILED head holds its aggregate only under the
// blocking policy, and ids without a visible row come back as missing.
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
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), storetest.DropPostgresTables(table)) })
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

	// Another transaction holds b's first row: the run stops there.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`SELECT 1 FROM %q WHERE id = $1 FOR UPDATE`, table), b[0]); err != nil {
		t.Fatal(err)
	}
	if cl, _ := claim(req, b...); len(cl.Events) != 0 {
		t.Errorf("claimed %v past a row another transaction locked", got(cl))
	}
	_ = tx.Rollback(ctx)
	if cl, _ := claim(req, b...); !slices.Equal(got(cl), b) {
		t.Errorf("after the lock: claimed %v, want %v", got(cl), b)
	}

	// A FAILED head holds its aggregate only under the blocking policy.
	if _, err := pool.Exec(ctx, fmt.Sprintf(`UPDATE %q SET status = 'FAILED' WHERE id = $1`, table), c[0]); err != nil {
		t.Fatal(err)
	}
	if cl, _ := claim(req, c[1]); len(cl.Events) != 0 {
		t.Errorf("claimed %v behind a FAILED event under the blocking policy", got(cl))
	}
	cont := req
	cont.FailedBlocks = false
	if cl, _ := claim(cont, c[1]); !slices.Equal(got(cl), c[1:2]) {
		t.Errorf("continue policy: claimed %v, want %v", got(cl), c[1:2])
	}

	if cl, missing := claim(req, 1<<50); len(cl.Events) != 0 || !slices.Equal(missing, []int64{1 << 50}) {
		t.Errorf("an id without a row: claimed %v, missing %v", got(cl), missing)
	}
}
