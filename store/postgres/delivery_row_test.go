package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/pgtest"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/storetest"
)

// A delivery is recorded on the event row (migration 7), not as a row of
// the attempts table, and the audit trail still shows it with the relay,
// the claim token, the times and the trace id. Older deliveries, recorded
// as attempt rows before the upgrade, are shown once.
func TestDeliveryRecordedOnTheEventRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	table := storetest.TableName("pgdlv")
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), pgtest.DropTables(table)); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	s, err := postgres.New(pool, postgres.Config{Table: table, NoNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	enqueueOne := func(agg string) {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := s.Enqueue(ctx, tx, payment(agg, 1)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	deliver := func(trace string) store.Claimed {
		t.Helper()
		c, err := s.Claim(ctx, store.ClaimRequest{RelayID: "relay-a", Limit: 10, Lease: time.Minute, FailedBlocks: true})
		if err != nil || len(c.Events) != 1 {
			t.Fatalf("claim: %v, %v; want one event", c, err)
		}
		ev := c.Events[0]
		res, err := s.Complete(ctx, store.CompleteRequest{Token: c.Token, RelayID: "relay-a", FailedBlocks: true,
			Outcomes: []store.Outcome{{ID: ev.ID, EventID: ev.EventID, Kind: store.Delivered, Attempted: true,
				Attempt: ev.Attempt, StartedAt: c.DBTime, FinishedAt: c.DBTime.Add(time.Millisecond), TraceID: trace}}})
		if err != nil || len(res.Applied) != 1 {
			t.Fatalf("complete: %+v, %v", res, err)
		}
		atts, err := s.Attempts(ctx, ev.EventID)
		if err != nil {
			t.Fatal(err)
		}
		if len(atts) != 1 || atts[0].Outcome != store.Delivered || atts[0].RelayID != "relay-a" || atts[0].ClaimToken != c.Token ||
			atts[0].Attempt != 1 || atts[0].TraceID != trace || !atts[0].FinishedAt.Equal(c.DBTime.Add(time.Millisecond)) {
			t.Fatalf("audit trail %+v, want the one delivery under token %s", atts, c.Token)
		}
		return ev
	}

	// Version 6: the delivery is an attempt row.
	if err := s.MigrateUpTo(ctx, 6); err != nil {
		t.Fatal(err)
	}
	enqueueOne("old")
	// The store's statements are those of the latest version, so the old
	// delivery is written as version 6 wrote it, by hand.
	var oldID int64
	var oldEvent string
	if err := pool.QueryRow(ctx, `UPDATE "`+table+`" SET status = 'PROCESSED', processed_at = now() RETURNING id, event_id::text`).
		Scan(&oldID, &oldEvent); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO "`+table+`_attempts" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at)
		VALUES ($1::uuid, gen_random_uuid(), 'DELIVERED', $2, 1, 'relay-old', now(), now())`, oldEvent, oldID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	oldEventID, err := outbox.ParseEventID(oldEvent)
	if err != nil {
		t.Fatal(err)
	}
	if atts, err := s.Attempts(ctx, oldEventID); err != nil || len(atts) != 1 || atts[0].RelayID != "relay-old" {
		t.Fatalf("the delivery from before the upgrade: %+v, %v; want it once", atts, err)
	}

	enqueueOne("new")
	ev := deliver("4bf92f3577b34da6a3ce929d0e0e4736")
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM "`+table+`_attempts" WHERE event_id = $1::uuid`, ev.EventID.String()).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("a delivery wrote %d rows in the attempts table, want 0", rows)
	}
}
