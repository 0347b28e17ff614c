package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/mysql"
)

// A PROCESSING row without a claim token (written by an older version, or
// by hand) holds its aggregate like any other claim's row, also while the
// relay has claims of its own in flight: "not one of mine" must not be
// NULL for it, which SQL's NOT (... IN (...)) would make it skip.
func TestProcessingRowWithoutTokenHoldsItsAggregate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{})
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, tx, payment("own-1", 1), payment("held-1", 1), payment("held-1", 2)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// The relay's own claim in flight: the event of own-1 only.
	if _, err := db.ExecContext(ctx, "UPDATE `"+s.Table()+"` SET status = 'PROCESSING', lock_token = NULL, locked_until = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE aggregate_id = 'held-1' ORDER BY id LIMIT 1"); err != nil {
		t.Fatal(err)
	}
	own, err := s.Claim(ctx, store.ClaimRequest{RelayID: "t", Limit: 1, Lease: time.Minute, FailedBlocks: true})
	if err != nil || len(own.Events) != 1 || own.Events[0].AggregateID != "own-1" {
		t.Fatalf("first claim = %+v, %v; want the event of own-1", own, err)
	}
	c, err := s.Claim(ctx, store.ClaimRequest{RelayID: "t", Limit: 100, Lease: time.Minute, FailedBlocks: true, Own: []string{own.Token}})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Events) != 0 {
		t.Fatalf("claimed %d events (%s/%s first) while held-1's first event is PROCESSING without a token; want none", len(c.Events), c.Events[0].AggregateID, c.Events[0].EventType)
	}
}
