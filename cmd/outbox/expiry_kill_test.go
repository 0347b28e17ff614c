package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/mysql"
)

// holdAggregateLock takes, in a transaction of its own, the lock Enqueue
// takes for the aggregate (PostgreSQL: the advisory lock; MySQL: the row
// of the aggregates table), so that a relay enqueueing a compensating
// event on it waits mid-transaction. It returns a function that waits
// until a relay waits for it, and the release. SQLite has no such lock:
// ok is false.
func holdAggregateLock(t *testing.T, kind, dsn, table, aggType, aggID string) (waitBlocked func(), release func(), ok bool) {
	t.Helper()
	ctx := context.Background()
	deadline := func(what string, cond func() (bool, error)) {
		t.Helper()
		end := time.Now().Add(2 * time.Minute)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			done, err := cond()
			if err != nil {
				t.Fatal(err)
			}
			if done {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("timed out waiting for %s", what)
			}
			<-tick.C
		}
	}
	switch kind {
	case "postgres":
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var holder int
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid() FROM (SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))) l`,
			table, aggType+"\x1f"+aggID).Scan(&holder); err != nil {
			t.Fatal(err)
		}
		watch, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		wait := func() {
			deadline("a relay waiting for the aggregate's advisory lock", func() (bool, error) {
				var n int
				// The statement text may be cut short (track_activity_query_size):
				// the waiter is found by whom it waits for.
				err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
                    WHERE wait_event_type = 'Lock' AND $1::int = ANY(pg_blocking_pids(pid))`, holder).Scan(&n)
				return n > 0, err
			})
		}
		return wait, func() {
			_ = tx.Rollback(ctx)
			_ = conn.Close(ctx)
			_ = watch.Close(ctx)
		}, true
	case "mysql":
		c, err := mysql.NewConnector(dsn)
		if err != nil {
			t.Fatal(err)
		}
		db := sql.OpenDB(c)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The row of the aggregates table (migration 2): Enqueue and the
		// insert trigger upsert it, so holding it makes them wait.
		if _, err := tx.ExecContext(ctx, "INSERT INTO `"+table+"_aggregates` (aggregate_type, aggregate_id, last_seq) VALUES (?, ?, 0) ON DUPLICATE KEY UPDATE last_seq = last_seq", aggType, aggID); err != nil {
			t.Fatal(err)
		}
		wait := func() {
			deadline("a relay waiting for the aggregate's lock row", func() (bool, error) {
				var n int
				err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.processlist WHERE info LIKE ? AND info NOT LIKE '%processlist%'",
					"INSERT INTO `"+table+"_aggregates`%").Scan(&n)
				return n > 0, err
			})
		}
		return wait, func() {
			_ = tx.Rollback()
			_ = db.Close()
		}, true
	}
	return nil, nil, false
}

// compensationCheck reads every event and returns how many are EXPIRED,
// and the compensating events by the id they compensate.
func compensationCheck(t *testing.T, dsn, table string) (expired int, comps map[string][]store.Record, b *backend) {
	t.Helper()
	ctx := context.Background()
	b, err := openBackend(ctx, dsn, table, outbox.Limits{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.close)
	recs, err := b.store.ListEvents(ctx, store.ListFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	comps = map[string][]store.Record{}
	for _, r := range recs {
		if r.Status == outbox.StatusExpired {
			expired++
		}
		if id := r.Headers[outbox.HeaderCompensates]; id != "" {
			comps[id] = append(comps[id], r)
		}
	}
	return expired, comps, b
}

// TestSIGKILLMidExpiry: a relay killed inside the transaction that moves
// events to EXPIRED and enqueues their compensating events (it waits there
// for an aggregate lock the test holds) leaves neither a compensation
// without an EXPIRED event nor the other way round; after a restart every
// expired event has exactly one compensating event, delivered.
func TestSIGKILLMidExpiry(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			const total = 200
			mustCLI(t, "", "migrate", "--db", dsn, "--table", table)
			past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)
			var lines strings.Builder
			for i := range total {
				fmt.Fprintf(&lines, `{"aggregate_type":"payment","aggregate_id":"exp-%03d","event_type":"ApprovalRequested","payload":{"n":%d},"expires_at":%q,"on_expired":{"event_type":"ApprovalExpired","payload":{"n":%d}}}`+"\n", i, i, past, i)
			}
			mustCLI(t, lines.String(), "enqueue", "--db", dsn, "--table", table)

			var mu sync.Mutex
			seen := map[string]int{}
			gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen[r.Header.Get("Outbox-Event-Id")]++
				mu.Unlock()
			}))
			defer gw.Close()
			relayArgs := []string{"relay", "--db", dsn, "--table", table, "--sink", gw.URL, "--batch", "10",
				"--poll-interval", "10ms", "--lease", "3s", "--sweep-interval", "100ms", "--progress", "0"}

			kind := bc.name
			wait, release, ok := holdAggregateLock(t, kind, dsn, table, "payment", "exp-150")
			cmd, stderr := startRelay(t, relayArgs...)
			if ok {
				wait() // the relay is inside an expiry transaction, waiting
			} else {
				// SQLite: kill as soon as some events expired; whatever the
				// relay was doing, its transaction is all or nothing.
				deadline := time.Now().Add(2 * time.Minute)
				for {
					n, _, b := compensationCheck(t, dsn, table)
					b.close()
					if n >= 20 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the relay expired nothing:\n%s", stderr.String())
					}
				}
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if ok {
				release()
			}
			expired, comps, b := compensationCheck(t, dsn, table)
			b.close()
			if expired == total && ok {
				t.Fatalf("every event expired before the kill: the kill did not land mid-expiry")
			}
			if len(comps) != expired {
				t.Fatalf("after SIGKILL mid-expiry: %d EXPIRED events and %d compensated ones; want as many", expired, len(comps))
			}
			t.Logf("killed with %d of %d expired", expired, total)

			cmd, stderr = startRelay(t, append(relayArgs, "--drain")...)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("drain after the kill: %v\n%s", err, stderr.String())
				}
			case <-time.After(3 * time.Minute):
				_ = cmd.Process.Kill()
				t.Fatalf("drain after the kill did not finish:\n%s", stderr.String())
			}
			expired, comps, b = compensationCheck(t, dsn, table)
			if expired != total || len(comps) != total {
				t.Fatalf("after the drain: %d EXPIRED, %d compensated; want %d each", expired, len(comps), total)
			}
			mu.Lock()
			defer mu.Unlock()
			for id, cs := range comps {
				if len(cs) != 1 || cs[0].Status != outbox.StatusProcessed || seen[cs[0].EventID.String()] == 0 {
					t.Fatalf("event %s: %d compensating events (%+v); want one, PROCESSED and delivered", id, len(cs), cs)
				}
				eid, err := outbox.ParseEventID(id)
				if err != nil {
					t.Fatal(err)
				}
				atts, err := b.store.Attempts(context.Background(), eid)
				if err != nil {
					t.Fatal(err)
				}
				links := 0
				for _, a := range atts {
					if a.Outcome == store.Compensated {
						links++
					}
				}
				if links != 1 {
					t.Fatalf("event %s: %d COMPENSATED audit rows, want 1: %+v", id, links, atts)
				}
			}
		})
	}
}
