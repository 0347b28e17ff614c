package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/relay/relaytest"
	"github.com/txoutbox/outbox/store/mysql"
)

// syncBuffer collects log lines from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func isConflict(err error) bool {
	var me *mysqldrv.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// TestProducersWhileTwoRelaysClaim runs producers that each commit a
// business row and events of a few shared aggregates, while two relays
// claim, publish and mark. Every committed event is delivered once, in id
// order per aggregate; lock conflicts inside the store are retried and
// counted, never surfaced in the relays' logs or as event failures.
func TestProducersWhileTwoRelaysClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	db.SetMaxOpenConns(16)
	var storeLog, relayLog syncBuffer
	s := newStore(t, db, mysql.Config{
		Logger: slog.New(slog.NewTextHandler(&storeLog, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	biz := s.Table() + "_payments"
	if _, err := db.ExecContext(ctx, "CREATE TABLE `"+biz+"` (id BIGINT AUTO_INCREMENT PRIMARY KEY, tx VARCHAR(100) NOT NULL, amount INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.ExecContext(context.Background(), "DROP TABLE IF EXISTS `"+biz+"`") })

	producers, txPerProducer, aggregates := 4, 150, 12
	if testing.Short() {
		txPerProducer = 40
	}
	recs := relaytest.NewRecorders(2)
	var relays []*relay.Relay
	for i, rec := range recs {
		r, err := relay.New(relay.Config{
			Store: s, Sink: rec, RelayID: fmt.Sprintf("relay-%d", i),
			BatchSize: 20, PollInterval: 5 * time.Millisecond, SweepInterval: 20 * time.Millisecond,
			Lease: 30 * time.Second, BackoffMin: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(&relayLog, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		relays = append(relays, r)
	}
	runCtx, stop := context.WithCancel(ctx)
	var relayWG sync.WaitGroup
	for _, r := range relays {
		relayWG.Add(1)
		go func() {
			defer relayWG.Done()
			if err := r.Run(runCtx); err != nil {
				t.Errorf("relay %s: %v", r.ID(), err)
			}
		}()
	}
	stopRelays := sync.OnceFunc(func() { stop(); relayWG.Wait() })
	t.Cleanup(stopRelays)

	var (
		mu            sync.Mutex
		committed     = map[outbox.EventID]bool{}
		producerRetry int
		wg            sync.WaitGroup
	)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(p), 7))
			for i := 0; i < txPerProducer; i++ {
				var events []outbox.Event
				for n := 1 + rnd.IntN(3); n > 0; n-- {
					agg := fmt.Sprintf("tx-%d", rnd.IntN(aggregates))
					events = append(events, outbox.Event{AggregateType: "payment", AggregateID: agg, EventType: "ApprovalRequested",
						Payload: []byte(fmt.Sprintf(`{"producer":%d,"n":%d}`, p, i))})
				}
				for attempt := 1; ; attempt++ {
					ids, err := produce(ctx, db, s, biz, events)
					if err == nil {
						mu.Lock()
						for _, id := range ids {
							committed[id] = true
						}
						mu.Unlock()
						break
					}
					if !isConflict(err) || attempt == 5 {
						t.Errorf("producer %d: %v", p, err)
						return
					}
					// The application retries its whole transaction.
					mu.Lock()
					producerRetry++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	total := len(committed)
	wait.Until(t, 3*time.Minute, "every committed event PROCESSED", func() (bool, error) {
		st, err := s.Stats(ctx, true)
		return st.Counts[outbox.StatusProcessed] == int64(total), err
	})
	stopRelays()

	all := recs[0].Shared()
	seen := map[outbox.EventID]int{}
	for _, d := range all {
		seen[d.EventID]++
		if !committed[d.EventID] {
			t.Fatalf("delivered %s, which no producer committed", d.EventID)
		}
	}
	for id := range committed {
		if seen[id] != 1 {
			t.Fatalf("event %s delivered %d times, want once (no faults were injected)", id, seen[id])
		}
	}
	if err := relaytest.CheckOrder(all); err != nil {
		t.Fatal(err)
	}
	for _, r := range relays {
		if st := r.Stats(); st.ClaimErrors != 0 || st.CompleteErrors != 0 || st.Failed != 0 || st.Retried != 0 {
			t.Errorf("relay %s stats %+v: no claim or mark may fail", r.ID(), st)
		}
	}
	for _, bad := range []string{"1213", "1205", "Deadlock", "Lock wait"} {
		if strings.Contains(relayLog.String(), bad) {
			t.Errorf("the relays' logs mention %q: a lock conflict escaped the store:\n%s", bad, relayLog.String())
		}
	}
	rs := s.Retries()
	logged := strings.Count(storeLog.String(), "lock conflict; retrying")
	if int64(logged) != rs.Deadlocks+rs.LockWaitTimeouts || rs.GaveUp != 0 {
		t.Errorf("store retries %+v, but %d retry log lines", rs, logged)
	}
	busy := 0
	for _, rec := range recs {
		if len(rec.Deliveries()) > 0 {
			busy++
		}
	}
	t.Logf("%d producers committed %d events over %d aggregates while 2 relays (%d and %d deliveries) claimed: "+
		"store retried %d deadlocks and %d lock wait timeouts (each logged at DEBUG), gave up on %d; producers retried %d transactions",
		producers, total, aggregates, len(recs[0].Deliveries()), len(recs[1].Deliveries()),
		rs.Deadlocks, rs.LockWaitTimeouts, rs.GaveUp, producerRetry)
}

// produce commits one business row and events in one transaction.
func produce(ctx context.Context, db *sql.DB, s *mysql.Store, biz string, events []outbox.Event) ([]outbox.EventID, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO `"+biz+"` (tx, amount) VALUES (?, ?)", events[0].AggregateID, 1000); err != nil {
		return nil, err
	}
	ids, err := s.Enqueue(ctx, tx, events...)
	if err != nil {
		return nil, err
	}
	return ids, tx.Commit()
}
