package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// RunProducers runs the producer contract of docs/PRODUCERS.md: every
// event gets aggregate_seq 1, 2, 3 ... per aggregate without gaps, whoever
// writes it; a plain SQL INSERT of the documented columns is enough; and
// concurrent plain-SQL producers of one aggregate are delivered in their
// commit order. The tests that write plain SQL skip when Harness.SQL is nil.
func RunProducers(t *testing.T, newHarness Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
	}{
		{"PlainInsertOfDocumentedColumns", testPlainInsert},
		{"SeqGapFreeUnderConcurrentEnqueue", testSeqConcurrentEnqueue},
		{"ConcurrentPlainSQLProducersKeepOrder", testPlainSQLProducersOrder},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newHarness(t))
		})
	}
}

// plainInsertSQL is the documented minimal INSERT of a producer.
func plainInsertSQL(h *Harness) string {
	q := "INSERT INTO " + h.Table + " (aggregate_type, aggregate_id, event_type, payload) VALUES (?, ?, ?, ?)"
	if h.Bind != nil {
		q = h.Bind(q)
	}
	return q
}

func needSQL(t *testing.T, h *Harness) {
	t.Helper()
	if h.SQL == nil || h.Table == "" {
		t.Skip("the harness gives no database/sql handle for plain-SQL producers")
	}
}

// claimAllDeliver claims until nothing is due, marks every claimed event
// delivered, and returns them in claim order.
func claimAllDeliver(t *testing.T, h *Harness) []store.Claimed {
	t.Helper()
	ctx := context.Background()
	var out []store.Claimed
	for {
		c, err := h.Store.Claim(ctx, store.ClaimRequest{RelayID: "producers", Limit: 500, Lease: time.Minute, FailedBlocks: true})
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		if len(c.Events) == 0 {
			return out
		}
		req := store.CompleteRequest{Token: c.Token, RelayID: "producers", FailedBlocks: true}
		for _, e := range c.Events {
			req.Outcomes = append(req.Outcomes, store.Outcome{ID: e.ID, EventID: e.EventID, Kind: store.Delivered,
				Attempt: e.Attempt, Attempted: true, StartedAt: c.DBTime, FinishedAt: c.DBTime})
		}
		if _, err := h.Store.Complete(ctx, req); err != nil {
			t.Fatalf("complete: %v", err)
		}
		out = append(out, c.Events...)
	}
}

func testPlainInsert(t *testing.T, h *Harness) {
	needSQL(t, h)
	ctx := context.Background()
	insert := plainInsertSQL(h)
	if _, err := h.SQL.ExecContext(ctx, insert, "payment", "tx-plain", "ApprovalRequested", `{"n":1}`); err != nil {
		t.Fatalf("a plain INSERT of aggregate_type, aggregate_id, event_type and payload: %v", err)
	}
	goIDs := enqueue(t, h, ev("tx-plain", 2))
	if _, err := h.SQL.ExecContext(ctx, insert, "payment", "tx-plain", "ApprovalRequested", `{"n":3}`); err != nil {
		t.Fatal(err)
	}
	// Immediately due: available_at is the database's now, in UTC.
	got := claimAllDeliver(t, h)
	if len(got) != 3 {
		t.Fatalf("claimed %d events, want the 3 just written, due at once", len(got))
	}
	seen := map[outbox.EventID]bool{}
	for i, e := range got {
		if want := int64(i + 1); e.AggregateSeq != want {
			t.Errorf("event %d (id %d): aggregate_seq %d, want %d", i, e.ID, e.AggregateSeq, want)
		}
		if e.EventID.IsZero() || seen[e.EventID] {
			t.Errorf("event %d: event_id %s is empty or repeated", i, e.EventID)
		}
		seen[e.EventID] = true
		if v := e.EventID[6] >> 4; v != 7 || e.EventID[8]&0xc0 != 0x80 {
			t.Errorf("event %d: event_id %s is not a UUIDv7 (version %d, variant byte %#x)", i, e.EventID, v, e.EventID[8])
		}
		if len(e.Headers) != 0 {
			t.Errorf("event %d: headers %v, want none", i, e.Headers)
		}
		if d := e.CreatedAt.Sub(time.Now()); d < -time.Minute || d > time.Minute {
			t.Errorf("event %d: created_at %s is %s from now: not UTC now", i, e.CreatedAt, d)
		}
	}
	if got[1].EventID != goIDs[0] {
		t.Errorf("the Enqueue event is not the second of the aggregate: %s, want %s", got[1].EventID, goIDs[0])
	}
	// A plain INSERT that leaves out a required column fails, naming it.
	bad := "INSERT INTO " + h.Table + " (aggregate_type, event_type, payload) VALUES (?, ?, ?)"
	if h.Bind != nil {
		bad = h.Bind(bad)
	}
	if _, err := h.SQL.ExecContext(ctx, bad, "payment", "E", `{}`); err == nil {
		t.Error("an INSERT without aggregate_id was accepted")
	}
}

func testSeqConcurrentEnqueue(t *testing.T, h *Harness) {
	ctx := context.Background()
	const producers, aggregates = 8, 5
	perProducer := scaled(h, 30)
	var writeMu sync.Mutex // SingleWriter: one open write transaction at a time
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perProducer; i++ {
				if h.SingleWriter {
					writeMu.Lock()
				}
				err := func() error {
					tx, err := h.Begin(ctx)
					if err != nil {
						return err
					}
					// Two events: one aggregate, and (every other tx) a second one.
					evs := []outbox.Event{ev(fmt.Sprintf("seq-%d", (p+i)%aggregates), p*1000+i)}
					if i%2 == 0 {
						evs = append(evs, ev(fmt.Sprintf("seq-%d", (p+i+1)%aggregates), p*1000+i))
					}
					if _, err := tx.Enqueue(ctx, evs...); err != nil {
						_ = tx.Rollback(ctx)
						return err
					}
					if i%5 == 4 { // rolled back: its numbers must not leave a gap
						return tx.Rollback(ctx)
					}
					return tx.Commit(ctx)
				}()
				if h.SingleWriter {
					writeMu.Unlock()
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("producer: %v", err)
	}
	checkGapFree(t, claimAllDeliver(t, h))
}

// checkGapFree checks that each aggregate's events, in id order, are
// numbered 1, 2, 3 ...
func checkGapFree(t *testing.T, events []store.Claimed) {
	t.Helper()
	sort.Slice(events, func(i, j int) bool { return events[i].ID < events[j].ID })
	next := map[string]int64{}
	for _, e := range events {
		k := e.OrderingKey()
		next[k]++
		if e.AggregateSeq != next[k] {
			t.Fatalf("aggregate %q: event id %d has aggregate_seq %d, want %d (gap or reorder)", e.AggregateID, e.ID, e.AggregateSeq, next[k])
		}
	}
	if len(next) == 0 {
		t.Fatal("no events")
	}
}

// testPlainSQLProducersOrder: 8 producers write the outbox table with plain
// SQL in transactions of their own, over 20 aggregates, while a relay
// runs. Every committed event is delivered once, each aggregate's events
// arrive numbered 1, 2, 3 ... with the outbox-aggregate-seq header, and
// each producer's events of an aggregate arrive in its commit order.
func testPlainSQLProducersOrder(t *testing.T, h *Harness) {
	needSQL(t, h)
	ctx := context.Background()
	const producers, aggregates = 8, 20
	perProducer := scaled(h, 60)
	insert := plainInsertSQL(h)
	rec := &Recorder{Name: "sink"}
	r := newRelay(t, testConfig(h, rec, "plain-sql"))
	stop := runRelays(t, r)

	var writeMu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	var committedMu sync.Mutex
	committed := 0
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perProducer; i++ {
				agg := fmt.Sprintf("plain-%d", (p*7+i)%aggregates)
				if h.SingleWriter {
					writeMu.Lock()
				}
				n, err := plainTx(ctx, h.SQL, insert, agg, p, i)
				if h.SingleWriter {
					writeMu.Unlock()
				}
				if err != nil {
					errs <- fmt.Errorf("producer %d tx %d: %w", p, i, err)
					return
				}
				committedMu.Lock()
				committed += n
				committedMu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// What the running relay has not delivered yet, a second relay drains.
	stop()
	drain(t, newRelay(t, testConfig(h, rec, "plain-sql-drain")), 2*time.Minute)

	got := rec.Deliveries()
	if len(got) != committed {
		t.Fatalf("delivered %d events, want the %d committed (0 lost, 0 repeated)", len(got), committed)
	}
	ids := map[int64]bool{}
	next := map[string]int64{}
	violations := 0
	for _, d := range got {
		if ids[d.ID] {
			t.Errorf("event id %d delivered twice", d.ID)
		}
		ids[d.ID] = true
		next[d.Key]++
		if d.Seq != next[d.Key] || d.SeqHeader != strconv.FormatInt(next[d.Key], 10) {
			violations++
			if violations <= 5 {
				t.Errorf("aggregate %q: delivery %d has seq %d (header %q), want %d", d.Key, next[d.Key], d.Seq, d.SeqHeader, next[d.Key])
			}
		}
	}
	// The payload says which producer and which of its transactions wrote
	// the event: per aggregate, each producer's transactions must arrive in
	// the order they committed.
	if violations > 0 {
		t.Fatalf("%d order violations among %d deliveries", violations, len(got))
	}
	checkProducerOrder(t, h, got)
	t.Logf("%d producers x %d transactions over %d aggregates: %d delivered, 0 lost, 0 order violations", producers, perProducer, aggregates, len(got))
}

// plainTx is one producer transaction: an event of agg and, every third
// transaction, a second event of the same aggregate. Every seventh
// transaction rolls back. It returns the events committed.
func plainTx(ctx context.Context, db *sql.DB, insert, agg string, p, i int) (int, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	n := 1
	if i%3 == 0 {
		n = 2
	}
	for k := 0; k < n; k++ {
		payload := fmt.Sprintf(`{"producer":%d,"tx":%d,"k":%d}`, p, i, k)
		if _, err := tx.ExecContext(ctx, insert, "payment", agg, "PaymentChanged", payload); err != nil {
			return 0, err
		}
	}
	if i%7 == 6 {
		return 0, tx.Rollback()
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return n, nil
}

// checkProducerOrder reads the delivered events' payloads back and checks
// that, per aggregate, each producer's events arrive in its own order.
func checkProducerOrder(t *testing.T, h *Harness, got []Delivery) {
	t.Helper()
	ctx := context.Background()
	last := map[string]int{} // aggregate/producer -> last tx*10+k
	for _, d := range got {
		rec, err := h.Store.GetEvent(ctx, d.EventID)
		if err != nil {
			t.Fatalf("get event %s: %v", d.EventID, err)
		}
		var p, tx, k int
		if _, err := fmt.Sscanf(string(rec.Payload), `{"producer":%d,"tx":%d,"k":%d}`, &p, &tx, &k); err != nil {
			t.Fatalf("payload %s: %v", rec.Payload, err)
		}
		key := d.Key + "/" + strconv.Itoa(p)
		pos := tx*10 + k
		if prev, ok := last[key]; ok && pos <= prev {
			t.Fatalf("aggregate %q: producer %d's event %d.%d delivered after its event %d.%d", d.Key, p, tx, k, prev/10, prev%10)
		}
		last[key] = pos
	}
}
