package relaytest

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txoutbox/outbox/store/storetest"
)

// RunProducers checks, through the relay, that concurrent plain-SQL
// producers of one aggregate are delivered in their commit order, numbered
// without gaps (the producer contract of docs/PRODUCERS.md; the store's
// side of it is storetest.RunProducers). It skips when Harness.SQL is nil.
func RunProducers(t *testing.T, newHarness storetest.Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *storetest.Harness)
	}{
		{"ConcurrentPlainSQLProducersKeepOrder", testPlainSQLProducersOrder},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newHarness(t))
		})
	}
}

// testPlainSQLProducersOrder: 8 producers write the outbox table with plain
// SQL in transactions of their own, over 20 aggregates, while a relay
// runs. Every committed event is delivered once, each aggregate's events
// arrive numbered 1, 2, 3 ... with the outbox-aggregate-seq header, and
// each producer's events of an aggregate arrive in its commit order.
func testPlainSQLProducersOrder(t *testing.T, h *storetest.Harness) {
	storetest.NeedSQL(t, h)
	ctx := context.Background()
	const producers, aggregates = 8, 20
	perProducer := storetest.Scaled(h, 60)
	insert := storetest.PlainInsertSQL(h)
	rec := &Recorder{Name: "sink"}
	r := newRelay(t, testConfig(h, rec, "plain-sql"))
	stop := runRelays(t, r)

	var writeMu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	var retries atomic.Int64
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
				// A lock conflict left the transaction uncommitted: retried
				// as a whole, as an application does.
				for try := 1; err != nil && h.Conflict != nil && h.Conflict(err) && try < 20; try++ {
					retries.Add(1)
					n, err = plainTx(ctx, h.SQL, insert, agg, p, i)
				}
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
	t.Logf("%d producers x %d transactions over %d aggregates (%d retried after a lock conflict): %d delivered, 0 lost, 0 order violations", producers, perProducer, aggregates, retries.Load(), len(got))
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
func checkProducerOrder(t *testing.T, h *storetest.Harness, got []Delivery) {
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
