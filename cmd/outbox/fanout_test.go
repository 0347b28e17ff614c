package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/outbox/internal/testenv"
)

// fanOutFile is the seed's two legs: approvals to the gateway and to
// Kafka, merchant events to Kafka only.
func fanOutFile(t *testing.T, gatewayURL, kafkaAddr string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "destinations.yaml")
	body := fmt.Sprintf(`destinations:
  gateway: { url: %q }
  events:  { url: %q }
routes:
  - match: { event_type: ApprovalRequested }
    to: [gateway, events]
  - match: { aggregate_type: merchant }
    to: [events]
`, gatewayURL+"/approve", "kafka://"+kafkaAddr)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// newKafka starts an in-process Kafka-protocol broker with the two topics.
func newKafka(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "payment.events", "merchant.events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// kafkaRecord is one record read back: its topic, key and the payload's
// aggregate and sequence.
type kafkaRecord struct {
	topic, key string
	agg, seq   int
}

// readKafka reads the two topics from the start until it has want
// records, or fails the test after a minute.
func readKafka(t *testing.T, addr string, want int) []kafkaRecord {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("payment.events", "merchant.events"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got []kafkaRecord
	for len(got) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d Kafka records within a minute", len(got), want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			var p struct{ Agg, Seq int }
			if err := json.Unmarshal(r.Value, &p); err != nil {
				t.Errorf("record %s/%d: payload %q: %v", r.Topic, r.Offset, r.Value, err)
			}
			got = append(got, kafkaRecord{r.Topic, string(r.Key), p.Agg, p.Seq})
		})
	}
	return got
}

// merchantLines returns n merchant events over aggs aggregates, numbered
// per aggregate as eventLines numbers the payments.
func merchantLines(n, aggs int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `{"aggregate_type":"merchant","aggregate_id":"m-%d","event_type":"MerchantUpdated","payload":{"agg":%d,"seq":%d}}`+"\n",
			i%aggs, i%aggs, i/aggs)
	}
	return b.String()
}

// TestFanOutGatewayAndKafkaFromOneTable: one relay with a destinations
// file delivers the approvals to an HTTP gateway and to Kafka, and the
// merchant events to Kafka only, from one outbox table: every event at
// every destination it is routed to, none elsewhere, in order per
// aggregate at each destination.
func TestFanOutGatewayAndKafkaFromOneTable(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			const payments, paymentAggs, merchants, merchantAggs = 200, 10, 60, 4
			gw := &gateway{}
			srv := httptest.NewServer(gw)
			defer srv.Close()
			kafka := newKafka(t)
			addr := kafka.ListenAddrs()[0]
			file := fanOutFile(t, srv.URL, addr)

			out := mustCLI(t, "", "migrate", "--db", dsn, "--table", table, "--config", file)
			for _, tb := range []string{table, table + "_to_gateway", table + "_to_events"} {
				if !strings.Contains(out, tb+": applied migrations") {
					t.Fatalf("migrate --config did not create %s:\n%s", tb, out)
				}
			}
			mustCLI(t, eventLines(payments, paymentAggs, "")+merchantLines(merchants, merchantAggs), "enqueue", "--db", dsn, "--table", table)
			mustCLI(t, "", "relay", "--db", dsn, "--table", table, "--config", file, "--drain",
				"--batch", "50", "--poll-interval", "10ms", "--progress", "0")

			rs, _ := gw.snapshot()
			if dups := checkDelivered(t, rs, payments, paymentAggs); dups != 0 {
				t.Errorf("the gateway got %d repeats with no crash", dups)
			}
			recs := readKafka(t, addr, payments+merchants)
			next := map[string]int{}
			perTopic := map[string]int{}
			for _, r := range recs {
				k := r.topic + "/" + r.key
				if r.seq != next[k] {
					t.Fatalf("%s: got seq %d, want %d (order broken at Kafka)", k, r.seq, next[k])
				}
				next[k]++
				perTopic[r.topic]++
			}
			if perTopic["payment.events"] != payments || perTopic["merchant.events"] != merchants {
				t.Fatalf("Kafka got %v, want %d payment and %d merchant events", perTopic, payments, merchants)
			}
			wantRoutedAndDelivered(t, dsn, table, payments, merchants)
		})
	}
}

// TestFanOutUnroutedEvents: an event written while the relay runs whose
// types no route matches ends FAILED with the reason (never dropped), and
// holds nothing back at the destinations; a relay that starts with such
// an event unfinished in the table refuses, naming the types and the line
// of routes:.
func TestFanOutUnroutedEvents(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			gw := &gateway{}
			srv := httptest.NewServer(gw)
			defer srv.Close()
			kafka := newKafka(t)
			file := fanOutFile(t, srv.URL, kafka.ListenAddrs()[0])
			mustCLI(t, "", "migrate", "--db", dsn, "--table", table, "--config", file)

			cmd, logs := startRelay(t, "relay", "--db", dsn, "--table", table, "--config", file,
				"--poll-interval", "10ms", "--progress", "0", "--max-retries", "3")
			// Written once the relay has checked the table's types: new events.
			waitUntil(t, time.Minute, "the relay to start", func() bool { return strings.Contains(logs.String(), "relay configured") }, logs)
			refund := `{"aggregate_type":"refund","aggregate_id":"r-1","event_type":"RefundIssued","payload":{"agg":0,"seq":0}}` + "\n"
			mustCLI(t, refund+eventLines(1, 1, ""), "enqueue", "--db", dsn, "--table", table)
			waitUntil(t, time.Minute, "the unrouted event FAILED and the approval at the gateway", func() bool {
				rs, _ := gw.snapshot()
				return count(statusJSON(t, dsn, table), "FAILED") == 1 && len(rs) == 1
			}, logs)
			out := mustCLI(t, "", "events", "list", "--db", dsn, "--table", table, "--status", "FAILED", "--json")
			if !strings.Contains(out, "RefundIssued") || !strings.Contains(out, `has no route for event_type \"RefundIssued\", aggregate_type \"refund\"`) {
				t.Fatalf("the FAILED event does not give the reason:\n%s", out)
			}
			_ = cmd.Process.Signal(os.Interrupt)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("relay stopped with %v\n%s", err, logs)
			}

			_, stderr, code := cli(t, "", "relay", "--db", dsn, "--table", table, "--config", file, "--drain")
			if code != 1 || !strings.Contains(stderr, file+":4: no route matches 1 type pair(s)") ||
				!strings.Contains(stderr, `event_type "RefundIssued", aggregate_type "refund"`) {
				t.Fatalf("relay with an unrouted event in the table: exit %d\n%s", code, stderr)
			}
		})
	}
}

// TestFanOutMetricsPerDestination: with --admin, a relay with a
// destinations file serves one set of metrics per relay, labelled with
// its destination (empty for the router, which delivers into the
// destinations' tables), and the admin API with its destinations.
func TestFanOutMetricsPerDestination(t *testing.T) {
	dsn, table := "sqlite://"+filepath.Join(t.TempDir(), "outbox.db"), newTable()
	gw := &gateway{}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	kafka := newKafka(t)
	file := fanOutFile(t, srv.URL, kafka.ListenAddrs()[0])
	mustCLI(t, "", "migrate", "--db", dsn, "--table", table, "--config", file)
	port := testenv.FreePorts(t, 1)[0]
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	relay, logs := startRelay(t, "relay", "--db", dsn, "--table", table, "--config", file, "--poll-interval", "10ms",
		"--progress", "0", "--admin", addr, "--gauge-interval", "100ms", "--admin-insecure-no-auth")
	mustCLI(t, eventLines(10, 2, "")+merchantLines(4, 1), "enqueue", "--db", dsn, "--table", table)
	want := []string{
		`outbox_deliveries_total{destination="gateway",outcome="delivered",route=`,
		`outbox_deliveries_total{destination="events",outcome="delivered",route="payment.events"} 10`,
		`outbox_deliveries_total{destination="events",outcome="delivered",route="merchant.events"} 4`,
		`outbox_deliveries_total{destination="",outcome="delivered",`,
	}
	var body string
	waitUntil(t, time.Minute, "the deliveries in /metrics with their destinations", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false
			}
		}
		return true
	}, logs)
	if !strings.Contains(body, `outbox_events{destination="gateway",status="PROCESSED"}`) {
		t.Errorf("no gauge of the gateway's table in /metrics:\n%s", grepLines(body, "outbox_events{"))
	}
	// The relay's admin API lists the file's destinations and their tables.
	resp, err := http.Get("http://" + addr + "/api/v1/destinations")
	if err != nil {
		t.Fatal(err)
	}
	api, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var listed struct {
		Destinations []struct{ Name, Table string }
	}
	if err := json.Unmarshal(api, &listed); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/destinations: %d %s (%v)", resp.StatusCode, api, err)
	}
	got := fmt.Sprint(listed.Destinations)
	if want := fmt.Sprintf("[{gateway %s_to_gateway} {events %s_to_events}]", table, table); got != want {
		t.Errorf("GET /api/v1/destinations lists %s, want %s", got, want)
	}
	_ = relay.Process.Signal(os.Interrupt)
	if err := relay.Wait(); err != nil {
		t.Fatalf("relay stopped with %v\n%s", err, logs)
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out = append(out, strings.TrimRight(line, "\n"))
		}
	}
	return strings.Join(out, "\n")
}

// TestDestinationFlagRefusals: --destination needs the file that defines
// it, a name the file defines, and a command that acts on one table.
func TestDestinationFlagRefusals(t *testing.T) {
	file := fanOutFile(t, "http://gateway.example", "127.0.0.1:1")
	db := "sqlite://" + filepath.Join(t.TempDir(), "x.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--db", db, "--destination", "gateway"}, "--destination gateway needs the destinations file that defines it: give --config FILE"},
		{[]string{"status", "--db", db, "--config", file, "--destination", "ledger"}, "--destination ledger is not a destination of " + file + " (it defines gateway, events)"},
		{[]string{"relay", "--db", db, "--config", file, "--destination", "gateway"}, "--destination goes with status, events, routes, audit, not with relay"},
		{[]string{"migrate", "--db", db, "--config", file, "--adopt"}, "--config (or OUTBOX_CONFIG) goes with migrate, --dry-run, --status or --check"},
	} {
		_, errOut, code := cli(t, "", tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("outbox %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
	}
	out := mustCLI(t, "", "migrate", "--db", db, "--config", file)
	out += mustCLI(t, "", "migrate", "--db", db, "--config", file, "--status")
	for _, want := range []string{"outbox_events_to_gateway: applied migrations", "outbox_events_to_events: schema version"} {
		if !strings.Contains(out, want) {
			t.Errorf("migrate --config lacks %q:\n%s", want, out)
		}
	}
	if out := mustCLI(t, "", "status", "--db", db, "--config", file, "--destination", "events"); !strings.Contains(out, "outbox_events_to_events") {
		t.Errorf("status --destination events does not report its table:\n%s", out)
	}
}

// TestFanOutFromTheWAL: the router reads the outbox table from
// PostgreSQL's logical replication (--source logical), and the fan-out
// delivers as it does when polling.
func TestFanOutFromTheWAL(t *testing.T) {
	dsn, table := postgresDSN(t), newTable()
	gw := &gateway{}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	kafka := newKafka(t)
	file := fanOutFile(t, srv.URL, kafka.ListenAddrs()[0])
	mustCLI(t, "", "migrate", "--db", dsn, "--table", table, "--config", file)
	// The slot outlives the test's schema: migrate --down drops it.
	t.Cleanup(func() { cli(t, "", "migrate", "--db", dsn, "--table", table, "--down", "--yes") })
	relay, logs := startRelay(t, "relay", "--db", dsn, "--table", table, "--config", file, "--source", "logical",
		"--poll-interval", "10ms", "--progress", "0")
	waitUntil(t, time.Minute, "the relay to start", func() bool { return strings.Contains(logs.String(), "relay configured") }, logs)
	const payments, aggs = 50, 5
	mustCLI(t, eventLines(payments, aggs, "")+merchantLines(10, 2), "enqueue", "--db", dsn, "--table", table)
	waitUntil(t, time.Minute, "every approval at the gateway", func() bool {
		rs, _ := gw.snapshot()
		return len(rs) >= payments
	}, logs)
	rs, _ := gw.snapshot()
	if dups := checkDelivered(t, rs, payments, aggs); dups != 0 {
		t.Errorf("%d repeats at the gateway", dups)
	}
	checkKafka(t, readKafka(t, kafka.ListenAddrs()[0], payments+10))
	_ = relay.Process.Signal(os.Interrupt)
	if err := relay.Wait(); err != nil {
		t.Fatalf("relay stopped with %v\n%s", err, logs)
	}
	if !strings.Contains(logs.String(), "source=logical") {
		t.Errorf("the relay did not say it reads the WAL:\n%s", logs)
	}
}

// wantRoutedAndDelivered checks the three tables of fanOutFile's fan-out
// once it drained: every event PROCESSED in the outbox table (routed), the
// approvals at the gateway's table, every event at the events' table.
func wantRoutedAndDelivered(t *testing.T, dsn, table string, payments, merchants int) {
	t.Helper()
	for tb, want := range map[string]int{table: payments + merchants, table + "_to_gateway": payments, table + "_to_events": payments + merchants} {
		if st := statusJSON(t, dsn, tb); count(st, "PROCESSED") != want {
			t.Errorf("%s after the drain: %v, want %d PROCESSED", tb, st, want)
		}
	}
}
