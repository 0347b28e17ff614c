package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/mysql"
	"github.com/txoutbox/outbox/store/storetest"
)

// TestBalanceDoesNotWaitOnALiveMember: while another relay's balance holds
// its row of the members table (it upserted it and has not committed), a
// relay's claim goes through. Its balance prunes the members not seen for
// long; one DELETE with a range on seen_ms locked the first live row past
// the range and waited on that relay, which, waiting in turn on lanes this
// one held, made the deadlocks that kept eight relays from sharing lanes.
func TestBalanceDoesNotWaitOnALiveMember(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{})
	storetest.Enqueue(t, harnessFor(s, db), storetest.PaymentEvent("live-member", 1))

	// A relay gone for long: the balance below prunes it.
	if _, err := db.ExecContext(ctx, "INSERT INTO `"+s.Table()+"_members` (relay_id, seen_ms) VALUES ('gone-relay', 1)"); err != nil {
		t.Fatal(err)
	}
	// The other relay's balance, stopped after its upsert: seen 5 s ago,
	// so that its row comes first in seen_ms order.
	other, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	if _, err := other.ExecContext(ctx, "INSERT INTO `"+s.Table()+"_members` (relay_id, seen_ms) VALUES ('other-relay', "+
		"CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) - 5000) ON DUPLICATE KEY UPDATE seen_ms = VALUES(seen_ms)"); err != nil {
		t.Fatal(err)
	}

	// The deadline only bounds the wait for a claim that blocks (InnoDB's
	// lock wait timeout is 50 s); one that does not block returns at once.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := s.Claim(cctx, store.ClaimRequest{RelayID: "claiming-relay", Limit: 10, Lease: time.Minute, FailedBlocks: true})
	if err != nil {
		t.Fatalf("claim while another relay's balance holds its member row: %v", err)
	}
	if len(c.Events) != 1 {
		t.Fatalf("claimed %d events, want 1", len(c.Events))
	}
	var gone int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM `"+s.Table()+"_members` WHERE relay_id = 'gone-relay'").Scan(&gone); err != nil {
		t.Fatal(err)
	}
	if gone != 0 {
		t.Fatal("the member not seen for long is still there after a balance: it must be pruned")
	}
}
