package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/txoutbox/outbox/internal/e2etest"
	"github.com/txoutbox/outbox/internal/testenv"
)

// restartableKafka is an in-process Kafka-protocol broker that can be
// stopped and started again on its port, with its data.
type restartableKafka struct {
	t    *testing.T
	port int
	dir  string
	c    *kfake.Cluster
}

func newRestartableKafka(t *testing.T) *restartableKafka {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	k := &restartableKafka{t: t, port: port, dir: t.TempDir()}
	k.start()
	t.Cleanup(func() {
		if k.c != nil {
			k.c.Close()
		}
	})
	return k
}

func (k *restartableKafka) addr() string { return fmt.Sprintf("127.0.0.1:%d", k.port) }

func (k *restartableKafka) start() {
	k.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(k.port), kfake.DataDir(k.dir),
			kfake.SeedTopics(3, "payment.events", "merchant.events"))
		if err == nil {
			k.c = c
			return
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("start kfake on port %d: %v", k.port, err)
		}
		<-time.After(20 * time.Millisecond) // the port may linger a moment after a close
	}
}

func (k *restartableKafka) stop() { k.c.Close(); k.c = nil }

// approvalLines returns the approvals from..to-1 of a stream spread over
// aggs aggregates, numbered per aggregate.
func approvalLines(from, to, aggs int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, `{"aggregate_type":"payment","aggregate_id":"tx-%d","event_type":"ApprovalRequested","payload":{"agg":%d,"seq":%d}}`+"\n",
			i%aggs, i%aggs, i/aggs)
	}
	return b.String()
}

// checkKafka asserts the records of each aggregate are in order, once
// repeats of a delivered event are dropped.
func checkKafka(t *testing.T, recs []kafkaRecord) {
	t.Helper()
	next := map[string]int{}
	for _, r := range recs {
		k := r.topic + "/" + r.key
		if r.seq < next[k] {
			continue // a repeat of a delivered event
		}
		if r.seq != next[k] {
			t.Fatalf("%s: got seq %d, want %d (order broken at Kafka)", k, r.seq, next[k])
		}
		next[k]++
	}
}

// TestFanOutKafkaDownGatewayGoesOn: Kafka is down for 60 s (15 s with
// -short) while approvals keep coming: the gateway gets every approval
// while Kafka is down, none twice; nothing ends FAILED at either
// destination; Kafka gets every event, in order, once it is back.
func TestFanOutKafkaDownGatewayGoesOn(t *testing.T) {
	outage := time.Minute
	if testenv.Short() {
		outage = 15 * time.Second
	}
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			const aggs, perTick = 5, 2
			gw := &gateway{}
			srv := httptest.NewServer(gw)
			defer srv.Close()
			kafka := newRestartableKafka(t)
			file := fanOutFile(t, srv.URL, kafka.addr()+"?produce_timeout=2s")
			mustCLI(t, "", "migrate", "--db", dsn, "--table", table, "--config", file)
			relay, logs := startRelay(t, "relay", "--db", dsn, "--table", table, "--config", file, "--poll-interval", "20ms", "--progress", "0")

			// Approvals at a steady 20 a second, from before the outage to its end.
			written := 0
			enqueue := func() {
				mustCLI(t, approvalLines(written, written+perTick, aggs), "enqueue", "--db", dsn, "--table", table)
				written += perTick
			}
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for written < 20 {
				<-tick.C
				enqueue()
			}
			waitUntil(t, 30*time.Second, "the first approvals at both destinations", func() bool {
				rs, _ := gw.snapshot()
				return len(rs) >= 10
			}, logs)
			kafka.stop()
			down := time.Now()
			lagMax := time.Duration(0)
			for time.Since(down) < outage {
				<-tick.C
				enqueue()
				// The gateway keeps up while Kafka is down: it is never more
				// than 10 s of approvals behind (held back by Kafka, it would
				// fall behind by the whole outage).
				if time.Since(down) > 10*time.Second {
					rs, _ := gw.snapshot()
					if behind := written - len(rs); behind > 10*10*perTick {
						t.Fatalf("%s into the Kafka outage the gateway is %d approvals behind (of %d written): it does not go on at full rate\n%s",
							time.Since(down).Round(time.Second), behind, written, logs)
					} else if d := time.Duration(behind) * time.Second / (10 * perTick); d > lagMax {
						lagMax = d
					}
				}
			}
			waitUntil(t, 10*time.Second, "every approval at the gateway, Kafka still down", func() bool {
				rs, _ := gw.snapshot()
				return len(rs) >= written
			}, logs)
			kafka.start()
			recs := readKafka(t, kafka.addr(), written)
			checkKafka(t, recs)
			rs, _ := gw.snapshot()
			if dups := checkDelivered(t, rs, written, aggs); dups != 0 {
				t.Errorf("the gateway got %d approvals twice: Kafka's outage repeated gateway requests", dups)
			}
			for _, tb := range []string{table, table + "_to_gateway", table + "_to_events"} {
				if st := statusJSON(t, dsn, tb); count(st, "FAILED") != 0 {
					t.Errorf("%s: %v, want nothing FAILED", tb, st)
				}
			}
			_ = relay.Process.Signal(os.Interrupt)
			if err := relay.Wait(); err != nil {
				t.Fatalf("relay stopped with %v\n%s", err, logs)
			}
			t.Logf("%d approvals over a %s Kafka outage; gateway lag at most about %s", written, outage, lagMax)
		})
	}
}

// TestFanOutPoisonEventAtOneDestination: the gateway refuses one
// approval for good: it ends FAILED at the gateway only, its aggregate's
// later approvals wait at the gateway (BLOCKED) and reach Kafka all the
// same, and every other aggregate goes on at both.
func TestFanOutPoisonEventAtOneDestination(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			const total, aggs = 100, 5 // tx-1 has seq 0..19; seq 3 is the poison
			poison := `"agg":1,"seq":3`
			var refusing atomic.Bool
			refusing.Store(true)
			gw := &gateway{}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				if refusing.Load() && strings.Contains(string(b), poison) {
					w.WriteHeader(http.StatusUnprocessableEntity)
					return
				}
				r.Body = io.NopCloser(strings.NewReader(string(b)))
				gw.ServeHTTP(w, r)
			}))
			defer srv.Close()
			kafka := newKafka(t)
			file := fanOutFile(t, srv.URL, kafka.ListenAddrs()[0])
			mustCLI(t, "", "migrate", "--db", dsn, "--table", table, "--config", file)
			mustCLI(t, approvalLines(0, total, aggs), "enqueue", "--db", dsn, "--table", table)
			mustCLI(t, "", "relay", "--db", dsn, "--table", table, "--config", file, "--drain", "--poll-interval", "10ms", "--progress", "0")

			recs := readKafka(t, kafka.ListenAddrs()[0], total)
			checkKafka(t, recs)
			rs, _ := gw.snapshot()
			perAgg := map[int]int{}
			for _, r := range rs {
				perAgg[r.agg]++
				if r.agg == 1 && r.seq >= 3 {
					t.Fatalf("the gateway got tx-1 seq %d, behind its FAILED seq 3", r.seq)
				}
			}
			if perAgg[1] != 3 || perAgg[0] != total/aggs || perAgg[4] != total/aggs {
				t.Fatalf("gateway deliveries per aggregate %v: want tx-1 to stop at 3 and the others complete", perAgg)
			}
			gwStatus := statusJSON(t, dsn, table+"_to_gateway")
			if count(gwStatus, "FAILED") != 1 || count(gwStatus, "BLOCKED") != total/aggs-4 {
				t.Errorf("gateway table: %v, want 1 FAILED and %d BLOCKED", gwStatus, total/aggs-4)
			}
			if st := statusJSON(t, dsn, table+"_to_events"); count(st, "PROCESSED") != total {
				t.Errorf("events table: %v, want all %d PROCESSED", st, total)
			}
			if st := statusJSON(t, dsn, table); count(st, "PROCESSED") != total {
				t.Errorf("outbox table: %v, want all %d routed (PROCESSED)", st, total)
			}

			// What the operator sees: status per destination, and the
			// event's delivery at each destination.
			out := mustCLI(t, "", "status", "--db", dsn, "--table", table, "--config", file)
			if want := fmt.Sprintf("gateway (%s_to_gateway): PENDING 0 PROCESSED %d FAILED 1 BLOCKED %d, dead letters 1, blocked aggregates 1", table, total-total/aggs+3, total/aggs-4); !strings.Contains(out, want) {
				t.Errorf("status --config does not show the gateway's figures %q:\n%s", want, out)
			}
			failed := mustCLI(t, "", "events", "list", "--db", dsn, "--table", table, "--config", file, "--destination", "gateway", "--status", "FAILED", "--json")
			var ev struct {
				EventID string `json:"event_id"`
			}
			if err := json.Unmarshal([]byte(strings.TrimSpace(failed)), &ev); err != nil || ev.EventID == "" {
				t.Fatalf("events list --destination gateway --status FAILED: %q: %v", failed, err)
			}
			show := mustCLI(t, "", "events", "show", ev.EventID, "--db", dsn, "--table", table, "--config", file, "--json")
			var shown struct {
				Status              string
				Route               []string
				DeliveredEverywhere bool `json:"delivered_everywhere"`
				Destinations        map[string]struct{ Status *string }
			}
			if err := json.Unmarshal([]byte(show), &shown); err != nil {
				t.Fatal(err)
			}
			if shown.Status != "PROCESSED" || shown.DeliveredEverywhere || fmt.Sprint(shown.Route) != "[gateway events]" || shown.Destinations["gateway"].Status == nil || *shown.Destinations["gateway"].Status != "FAILED" ||
				shown.Destinations["events"].Status == nil || *shown.Destinations["events"].Status != "PROCESSED" {
				t.Fatalf("events show --config: want routed, FAILED at the gateway and PROCESSED at events:\n%s", show)
			}

			// The operator retries it at the gateway once it accepts it:
			// the aggregate moves on there, and Kafka gets nothing again.
			refusing.Store(false)
			mustCLI(t, "", "events", "retry", ev.EventID, "--db", dsn, "--table", table, "--config", file, "--destination", "gateway", "--reason", "gateway fixed")
			mustCLI(t, "", "relay", "--db", dsn, "--table", table, "--config", file, "--drain", "--poll-interval", "10ms", "--progress", "0")
			rs, _ = gw.snapshot()
			if dups := checkDelivered(t, rs, total, aggs); dups != 0 {
				t.Errorf("the gateway got %d repeats", dups)
			}
			if out := mustCLI(t, "", "events", "show", ev.EventID, "--db", dsn, "--table", table, "--config", file); !strings.Contains(out, "delivered at every destination of its route (gateway, events)") {
				t.Errorf("events show --config after the retry:\n%s", out)
			}
			if st := statusJSON(t, dsn, table+"_to_events"); count(st, "PROCESSED") != total {
				t.Errorf("events table after the retry: %v", st)
			}
		})
	}
}

// TestFanOutFleetOfThree: three relay processes with the same file drain
// one table: every event at every destination it is routed to, in order
// per aggregate at each.
func TestFanOutFleetOfThree(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			const payments, paymentAggs, merchants, merchantAggs = 600, 20, 150, 5
			gw := &gateway{}
			srv := httptest.NewServer(gw)
			defer srv.Close()
			kafka := newKafka(t)
			file := fanOutFile(t, srv.URL, kafka.ListenAddrs()[0])
			mustCLI(t, "", "migrate", "--db", dsn, "--table", table, "--config", file)
			mustCLI(t, eventLines(payments, paymentAggs, "")+merchantLines(merchants, merchantAggs), "enqueue", "--db", dsn, "--table", table)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			var fleet []*e2etest.Process
			for range 3 {
				fleet = append(fleet, e2etest.StartCLI(t, "relay", "--db", dsn, "--table", table, "--config", file, "--drain",
					"--batch", "20", "--poll-interval", "10ms", "--progress", "0"))
			}
			for _, p := range fleet {
				p.Wait(ctx, t)
			}
			rs, _ := gw.snapshot()
			checkDelivered(t, rs, payments, paymentAggs)
			recs := readKafka(t, kafka.ListenAddrs()[0], payments+merchants)
			checkKafka(t, recs)
			wantRoutedAndDelivered(t, dsn, table, payments, merchants)
		})
	}
}

// TestFanOutFromAnAdoptedTable: a team's own outbox table, adopted, fans
// out like one outbox made: `migrate --config` creates the destination
// tables beside it and leaves its rows alone; its pending rows reach the
// gateway and Kafka, in order, and the team's delivered rows stay as they
// were.
func TestFanOutFromAnAdoptedTable(t *testing.T) {
	for _, bc := range adoptBackends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			tt := newTeamTable(t, bc)
			const aggs, perAgg = 3, 4
			for seq := range perAgg {
				for agg := range aggs {
					tt.insert(t, agg, seq, "PENDING", 0, false)
				}
			}
			tt.insert(t, 9, 0, "PROCESSED", 0, true) // delivered before the adoption
			args := []string{"--db", tt.dsn, "--table", tt.table}
			mustCLI(t, "", append([]string{"migrate", "--adopt", "--aggregate-type", "payment"}, args...)...)
			before := tt.rows(t)

			gw := &gateway{}
			srv := httptest.NewServer(gw)
			defer srv.Close()
			kafka := newKafka(t)
			file := fanOutFile(t, srv.URL, kafka.ListenAddrs()[0])
			mustCLI(t, "", append([]string{"migrate", "--config", file}, args...)...)
			if got := tt.rows(t); !mapsEqual(got, before) {
				t.Fatalf("migrate --config changed the adopted table's rows:\nbefore %v\nafter  %v", before, got)
			}
			mustCLI(t, "", append([]string{"relay", "--config", file, "--drain", "--poll-interval", "10ms", "--progress", "0"}, args...)...)
			rs, _ := gw.snapshot()
			if dups := checkDelivered(t, rs, aggs*perAgg, aggs); dups != 0 {
				t.Errorf("the gateway got %d repeats", dups)
			}
			checkKafka(t, readKafka(t, kafka.ListenAddrs()[0], aggs*perAgg))
			st := statusJSON(t, tt.dsn, tt.table)
			if count(st, "PROCESSED") != aggs*perAgg+1 {
				t.Errorf("adopted table after the drain: %v, want every row PROCESSED", st)
			}
		})
	}
}

// TestFanOutDeadlinePerDestination: the seed's QR code deadline, per
// destination. Kafka is down when an approval with a 3 s deadline is
// written: the gateway gets it in time; at Kafka's table the copy ends
// EXPIRED once the deadline passes, and its compensating event is written
// there and reaches Kafka when it is back. Nothing expires at the gateway.
func TestFanOutDeadlinePerDestination(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			gw := &gateway{}
			srv := httptest.NewServer(gw)
			defer srv.Close()
			kafka := newRestartableKafka(t)
			file := fanOutFile(t, srv.URL, kafka.addr()+"?produce_timeout=1s")
			mustCLI(t, "", "migrate", "--db", dsn, "--table", table, "--config", file)
			relay, logs := startRelay(t, "relay", "--db", dsn, "--table", table, "--config", file, "--poll-interval", "20ms",
				"--progress", "0", "--backoff-min", "100ms", "--backoff-max", "500ms", "--sweep-interval", "200ms")
			waitUntil(t, time.Minute, "the relay to start", func() bool { return strings.Contains(logs.String(), "relay configured") }, logs)
			kafka.stop()
			line := `{"aggregate_type":"payment","aggregate_id":"tx-0","event_type":"ApprovalRequested","payload":{"agg":0,"seq":0},"ttl":"3s","on_expired":{"event_type":"ApprovalExpired"}}` + "\n"
			mustCLI(t, line, "enqueue", "--db", dsn, "--table", table)
			waitUntil(t, time.Minute, "the approval at the gateway and its copy EXPIRED at Kafka's table", func() bool {
				rs, _ := gw.snapshot()
				return len(rs) == 1 && count(statusJSON(t, dsn, table+"_to_events"), "EXPIRED") == 1
			}, logs)
			kafka.start()
			recs := readKafka(t, kafka.addr(), 1)
			if len(recs) != 1 || recs[0].topic != "payment.events" {
				t.Fatalf("Kafka got %v, want the compensating event on payment.events", recs)
			}
			out := mustCLI(t, "", "events", "list", "--db", dsn, "--table", table, "--config", file, "--destination", "events", "--json")
			if !strings.Contains(out, `"event_type":"ApprovalExpired"`) || !strings.Contains(out, `"status":"EXPIRED"`) {
				t.Fatalf("Kafka's table does not hold the EXPIRED copy and its compensating event:\n%s", out)
			}
			waitUntil(t, time.Minute, "the compensating event PROCESSED at Kafka's table", func() bool {
				return count(statusJSON(t, dsn, table+"_to_events"), "PROCESSED") == 1
			}, logs)
			if st := statusJSON(t, dsn, table+"_to_gateway"); count(st, "PROCESSED") != 1 || count(st, "EXPIRED") != 0 {
				t.Errorf("gateway table: %v, want the approval PROCESSED and nothing EXPIRED", st)
			}
			_ = relay.Process.Signal(os.Interrupt)
			if err := relay.Wait(); err != nil {
				t.Fatalf("relay stopped with %v\n%s", err, logs)
			}
		})
	}
}
