package mysql_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/mysql"
	"github.com/txoutbox/outbox/store/storetest"
)

// ClaimIDs keeps the claim's per-aggregate rules on MySQL as on
// PostgreSQL (store/postgres's TestClaimIDsKeepsAggregateOrder): it never
// claims an event while an earlier unfinished one of its aggregate is
// neither in the call nor in the relay's own claims, it claims nothing in
// a lane another relay holds, a FAILED head holds its aggregate only under
// the blocking policy, and ids without a visible row come back as missing.
func TestMySQLClaimIDsKeepsAggregateOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{Table: storetest.TableName("my_ids")})
	h := harnessFor(s, db)
	ids := map[string][]int64{}
	eventIDs := map[string][]outbox.EventID{}
	for _, agg := range []string{"a", "b", "c"} {
		eventIDs[agg] = storetest.Enqueue(t, h, storetest.PaymentEvent(agg, 1), storetest.PaymentEvent(agg, 2), storetest.PaymentEvent(agg, 3))
		rows, err := db.QueryContext(ctx, "SELECT id FROM `"+s.Table()+"` WHERE aggregate_id = ? ORDER BY id", agg)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids[agg] = append(ids[agg], id)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		if len(ids[agg]) != 3 {
			t.Fatalf("aggregate %s has rows %v, want 3", agg, ids[agg])
		}
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
	first, _ := claim(req, a[1], a[0], a[0]) // out of order, with a repeat
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
	lanes := "`" + s.Table() + "_lanes`"
	if _, err := db.ExecContext(ctx, "UPDATE "+lanes+" SET owner = 'other', token = 42,"+
		" lease_until_ms = CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED) + 3600000"+
		" WHERE lane = (SELECT lane FROM `"+s.Table()+"` WHERE id = ?)", b[0]); err != nil {
		t.Fatal(err)
	}
	if cl, _ := claim(req, b...); len(cl.Events) != 0 {
		t.Errorf("claimed %v in a lane another relay holds", got(cl))
	}
	if _, err := db.ExecContext(ctx, "UPDATE "+lanes+" SET owner = NULL, token = NULL, lease_until_ms = 0 WHERE owner = 'other'"); err != nil {
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
	if _, err := db.ExecContext(ctx, "UPDATE `"+s.Table()+"` SET status = 'FAILED' WHERE id = ?", c[0]); err != nil {
		t.Fatal(err)
	}
	if cl, _ := claim(req, c[1]); len(cl.Events) != 0 {
		t.Errorf("claimed %v behind a FAILED event under the blocking policy", got(cl))
	}
	cont := req
	cont.FailedBlocks = false
	if _, err := s.Sweep(ctx, store.SweepRequest{RelayID: "sweeper", FailedBlocks: false}); err != nil {
		t.Fatal(err)
	}
	if cl, _ := claim(cont, c[1]); !slices.Equal(got(cl), c[1:2]) {
		t.Errorf("continue policy: claimed %v, want %v", got(cl), c[1:2])
	}
	if r, err := s.GetEvent(ctx, eventIDs["c"][1]); err != nil || r.Status != outbox.StatusProcessing {
		t.Errorf("the event claimed by id is %s (%v), want PROCESSING", r.Status, err)
	}

	if cl, missing := claim(req, 1<<50); len(cl.Events) != 0 || !slices.Equal(missing, []int64{1 << 50}) {
		t.Errorf("an id without a row: claimed %v, missing %v", got(cl), missing)
	}
	if _, _, err := s.ClaimIDs(ctx, store.ClaimRequest{Limit: 10, Lease: time.Minute}, a); err == nil {
		t.Error("ClaimIDs without a relay id succeeded")
	}
}
