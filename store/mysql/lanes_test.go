package mysql_test

import (
	"context"
	"crypto/md5"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/mysql"
	"github.com/txoutbox/outbox/store/storetest"
)

// harnessFor is a harness on s (db its database), for storetest.Enqueue.
func harnessFor(s *mysql.Store, db *sql.DB) *storetest.Harness {
	return &storetest.Harness{Store: s, SQL: db, Table: s.Table(),
		Begin: func(ctx context.Context) (storetest.Tx, error) {
			tx, err := db.BeginTx(ctx, nil)
			return myTx{tx, s}, err
		}}
}

// TestLaneIsPostgresLane: an aggregate's lane is the first byte of
// MD5(aggregate_type ':' aggregate_id) modulo 64, as on PostgreSQL, for
// every producer (Enqueue and a plain INSERT) and in the aggregates table,
// whatever the text.
func TestLaneIsPostgresLane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{})
	ids := []string{"tx-1", "tx-2", "Ünïcødé-集", "a:b", "x"}
	var events []outbox.Event
	for _, id := range ids {
		events = append(events, storetest.PaymentEvent(id, 1))
	}
	storetest.Enqueue(t, harnessFor(s, db), events...)
	if _, err := db.ExecContext(ctx, "INSERT INTO `"+s.Table()+"` (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'plain-1', 'E', '{}')"); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for _, id := range ids {
		sum := md5.Sum([]byte("payment:" + id))
		want["payment/"+id] = int(sum[0]) % 64
	}
	sum := md5.Sum([]byte("order:plain-1"))
	want["order/plain-1"] = int(sum[0]) % 64
	for _, table := range []string{s.Table(), s.Table() + "_aggregates"} {
		rows, err := db.QueryContext(ctx, "SELECT aggregate_type, aggregate_id, lane FROM `"+table+"`")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var typ, id string
			var lane int
			if err := rows.Scan(&typ, &id, &lane); err != nil {
				t.Fatal(err)
			}
			if w, ok := want[typ+"/"+id]; !ok || lane != w {
				t.Errorf("%s: %s/%s is in lane %d, want %d", table, typ, id, lane, w)
			}
			n++
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		if n != len(want) {
			t.Errorf("%s: %d rows, want %d", table, n, len(want))
		}
	}
}

// TestClaimedRowReadsProcessing: a PENDING row a claim holds is PROCESSING
// to every reader (GetEvent, ListEvents and its status filters, Stats, the
// snapshot, the admin queries) under the claim's token until its lane's
// lease ends, an operator's action refuses it, and the sweeper neither
// expires nor blocks it; once completed it is PROCESSED.
func TestClaimedRowReadsProcessing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{})
	ev := storetest.PaymentEvent("busy-1", 1)
	ev.TTL = time.Hour
	ids := storetest.Enqueue(t, harnessFor(s, db), ev, storetest.PaymentEvent("free-1", 1))
	busy, free := ids[0], ids[1]
	c, err := s.Claim(ctx, store.ClaimRequest{RelayID: "r1", Limit: 1, Lease: time.Minute, FailedBlocks: true})
	if err != nil || len(c.Events) != 1 || c.Events[0].EventID != busy {
		t.Fatalf("claim = %+v, %v; want busy-1's event", c, err)
	}
	r, err := s.GetEvent(ctx, busy)
	if err != nil || r.Status != outbox.StatusProcessing || r.LockToken != c.Token || !r.LockedUntil.After(c.DBTime) ||
		r.LockedUntil.After(c.DBTime.Add(time.Minute+time.Second)) {
		t.Fatalf("claimed event = %+v, %v; want PROCESSING under token %s until its lane's lease ends", r, err, c.Token)
	}
	if r, err := s.GetEvent(ctx, free); err != nil || r.Status != outbox.StatusPending || r.LockToken != "" || !r.LockedUntil.IsZero() {
		t.Fatalf("unclaimed event = %+v, %v; want PENDING", r, err)
	}
	for status, want := range map[outbox.Status]outbox.EventID{outbox.StatusProcessing: busy, outbox.StatusPending: free} {
		recs, err := s.ListEvents(ctx, store.ListFilter{Status: status, AggregateType: "payment"})
		if err != nil || len(recs) != 1 || recs[0].EventID != want {
			t.Errorf("ListEvents(%s) = %d records, %v; want %s only", status, len(recs), err, want)
		}
	}
	if _, err := s.ListEvents(ctx, store.ListFilter{Status: "NOPE"}); err == nil {
		t.Error("ListEvents with an unknown status succeeded")
	}
	st, err := s.Stats(ctx, true)
	if err != nil || st.Counts[outbox.StatusProcessing] != 1 || st.Counts[outbox.StatusPending] != 1 {
		t.Errorf("stats = %v, %v; want 1 PROCESSING and 1 PENDING", st.Counts, err)
	}
	snap, err := s.Snapshot(ctx, store.SnapshotRequest{FailedBlocks: true})
	if err != nil || snap.Counts[outbox.StatusProcessing] != 1 || snap.Counts[outbox.StatusPending] != 1 {
		t.Errorf("snapshot = %v, %v; want 1 PROCESSING and 1 PENDING", snap.Counts, err)
	}
	aq := s.AdminQueries()
	defer aq.Close()
	for _, status := range []outbox.Status{outbox.StatusProcessing, outbox.StatusPending} {
		recs, err := aq.QueryEvents(ctx, store.EventQuery{Statuses: []outbox.Status{status}, Limit: 10})
		if err != nil || len(recs) != 1 || recs[0].Status != status {
			t.Errorf("admin QueryEvents(%s) = %+v, %v; want one event of that status", status, recs, err)
		}
	}
	if err := s.Skip(ctx, store.OperatorAction{EventID: busy, Actor: "test"}); !errors.Is(err, outbox.ErrConflict) {
		t.Errorf("skip of the claimed event: %v; want ErrConflict (it is PROCESSING)", err)
	}
	// The deadline passes while the claim holds it: the sweeper leaves it
	// to the relay, which claimed it before its deadline.
	if _, err := db.ExecContext(ctx, "UPDATE `"+s.Table()+"` SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE event_id = ?", busy.String()); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Sweep(ctx, store.SweepRequest{RelayID: "sweeper", FailedBlocks: true}); err != nil || res.Expired != 0 {
		t.Fatalf("sweep = %+v, %v; want nothing expired (the claim holds the event)", res, err)
	}
	res, err := s.Complete(ctx, store.CompleteRequest{Token: c.Token, RelayID: "r1", FailedBlocks: true,
		Outcomes: []store.Outcome{{ID: c.Events[0].ID, EventID: busy, Kind: store.Delivered, Attempted: true, Attempt: 1}}})
	if err != nil || len(res.Applied) != 1 {
		t.Fatalf("complete = %+v, %v", res, err)
	}
	if r, err := s.GetEvent(ctx, busy); err != nil || r.Status != outbox.StatusProcessed || r.LockToken != "" {
		t.Fatalf("completed event = %+v, %v; want PROCESSED", r, err)
	}
	var claims int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+s.Table()+"_claims`").Scan(&claims); err != nil || claims != 0 {
		t.Fatalf("%d claims rows after the completion, %v; want none", claims, err)
	}
}

// TestTwoRelaysShareTheLanes: two relays balance to 32 lanes each; each
// claims only the events of its own lanes (read lane by lane), and
// together they claim every event once.
func TestTwoRelaysShareTheLanes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{})
	var events []outbox.Event
	for a := 0; a < 40; a++ {
		events = append(events, storetest.PaymentEvent(fmt.Sprint("share-", a), 1), storetest.PaymentEvent(fmt.Sprint("share-", a), 2))
	}
	storetest.Enqueue(t, harnessFor(s, db), events...)
	const lease = time.Minute
	for _, relay := range []string{"a", "b", "a", "b"} {
		if err := s.BalanceLanes(ctx, relay, lease); err != nil {
			t.Fatal(err)
		}
	}
	a, b := s.HeldLanes("a"), s.HeldLanes("b")
	if len(a) != 32 || len(b) != 32 {
		t.Fatalf("relay a holds %d lanes, b %d; want 32 each", len(a), len(b))
	}
	for l := range a {
		if _, both := b[l]; both {
			t.Fatalf("lane %d is held by both relays", l)
		}
	}
	laneOf := map[int64]int{}
	rows, err := db.QueryContext(ctx, "SELECT id, lane FROM `"+s.Table()+"`")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var lane int
		if err := rows.Scan(&id, &lane); err != nil {
			t.Fatal(err)
		}
		laneOf[id] = lane
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	seen := map[int64]string{}
	for _, relay := range []string{"a", "b"} {
		held := s.HeldLanes(relay)
		c, err := s.Claim(ctx, store.ClaimRequest{RelayID: relay, Limit: 100, Lease: lease, FailedBlocks: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range c.Events {
			if _, ok := held[laneOf[e.ID]]; !ok {
				t.Errorf("relay %s claimed event %d of lane %d, which it does not hold", relay, e.ID, laneOf[e.ID])
			}
			if other, dup := seen[e.ID]; dup {
				t.Errorf("event %d claimed by %s and %s", e.ID, other, relay)
			}
			seen[e.ID] = relay
		}
	}
	if len(seen) != len(events) {
		t.Fatalf("the two relays claimed %d events, want %d", len(seen), len(events))
	}
}

// TestRelayIDTheLanesCannotHold: a relay id the lane tables cannot store
// as it is gets a clear error that says what to change.
func TestRelayIDTheLanesCannotHold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{})
	for name, id := range map[string]string{"too long": strings.Repeat("r", 201), "not UTF-8": "relay-\xff"} {
		_, err := s.Claim(ctx, store.ClaimRequest{RelayID: id, Limit: 1, Lease: time.Minute})
		if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "--relay-id") {
			t.Errorf("%s: claim: %v; want ErrInvalidConfig naming --relay-id", name, err)
		}
		if err := s.BalanceLanes(ctx, id, time.Minute); !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("%s: balance: %v; want ErrInvalidConfig", name, err)
		}
	}
	if _, err := s.Claim(ctx, store.ClaimRequest{RelayID: strings.Repeat("é", 200), Limit: 1, Lease: time.Minute}); err != nil {
		t.Errorf("claim with a relay id of 200 characters: %v", err)
	}
}

// laneOfID is the lane of aggregate ("payment", id).
func laneOfID(id string) int {
	sum := md5.Sum([]byte("payment:" + id))
	return int(sum[0]) % 64
}

// TestWindowOfSomeLanesIsExact: a relay that holds some of the lanes reads
// a few rows of each lane and merges them; a lane whose rows all made the
// window is read again, so the window is the first Limit due rows of its
// lanes whatever their spread: here a later aggregate of a lane behind 30
// events of a hot one is in the window, and gets its head claimed beside
// the hot aggregate's run.
func TestWindowOfSomeLanesIsExact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{})
	for _, relay := range []string{"a", "b", "a", "b"} {
		if err := s.BalanceLanes(ctx, relay, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	held := s.HeldLanes("a")
	if len(held) != 32 {
		t.Fatalf("relay a holds %d lanes, want 32", len(held))
	}
	var hot, late string
	for i := 0; late == ""; i++ {
		id := fmt.Sprint("spread-", i)
		if _, ok := held[laneOfID(id)]; !ok {
			continue
		}
		switch {
		case hot == "":
			hot = id
		case laneOfID(id) == laneOfID(hot):
			late = id
		}
	}
	var events []outbox.Event
	for n := 1; n <= 30; n++ {
		events = append(events, storetest.PaymentEvent(hot, n))
	}
	storetest.Enqueue(t, harnessFor(s, db), events...)
	storetest.Enqueue(t, harnessFor(s, db), storetest.PaymentEvent(late, 1))
	// Relay a reads 16 rows of each of its lanes, and its window holds
	// the lane's first 40.
	c, err := s.Claim(ctx, store.ClaimRequest{RelayID: "a", Limit: 40, Lease: time.Minute, FailedBlocks: true, StrictFIFO: true})
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, e := range c.Events {
		per[e.AggregateID]++
	}
	if per[late] != 1 || per[hot] != 20 {
		t.Fatalf("claimed %v; want the late aggregate's event and 20 of the hot one's (the window names both, a run is 40/2 long)", per)
	}
}

// TestRunsAreEachAggregatesFirstRows: a run is an aggregate's first n
// unfinished rows even when the read knows only a later one: here an
// aggregate named by its deadline event alone, whose earlier events are
// past the window, gets its first two (n = 4/2) claimed.
func TestRunsAreEachAggregatesFirstRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{})
	var events []outbox.Event
	for n := 1; n <= 4; n++ {
		events = append(events, storetest.PaymentEvent("first-a", n))
	}
	events = append(events, storetest.PaymentEvent("first-x", 1), storetest.PaymentEvent("first-x", 2))
	x3 := storetest.PaymentEvent("first-x", 3)
	x3.TTL = time.Hour
	events = append(events, x3)
	storetest.Enqueue(t, harnessFor(s, db), events...)
	c, err := s.Claim(ctx, store.ClaimRequest{RelayID: "r", Limit: 4, FIFOShare: 0.5, Lease: time.Minute, FailedBlocks: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range c.Events {
		got = append(got, fmt.Sprintf("%s/%d", e.AggregateID, e.AggregateSeq))
	}
	if want := "[first-a/1 first-a/2 first-x/1 first-x/2]"; fmt.Sprint(got) != want {
		t.Fatalf("claimed %v, want %s", got, want)
	}
}
