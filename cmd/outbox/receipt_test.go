package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/outbox/sink"
)

// receiptGateway answers the first request of each event 503 and the next
// ones 200, each with a body and headers of its own, and keeps what it
// received and what it answered.
type receiptGateway struct {
	mu      sync.Mutex
	answers map[string][]gatewayAnswer // by Webhook-Id (the event id)
}

// gatewayAnswer is one request as the gateway saw it and its answer.
type gatewayAnswer struct {
	status                    int
	bodySHA256, headersSHA256 string
	signature                 string
	requestSHA256             string
}

func (g *receiptGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id := r.Header.Get("Webhook-Id")
	g.mu.Lock()
	n := len(g.answers[id])
	status := http.StatusOK
	if n == 0 {
		status = http.StatusServiceUnavailable
	}
	answer := fmt.Sprintf(`{"approval":%q,"ref":"gw-%s-%d"}`, strings.ToLower(http.StatusText(status)), id, n)
	// Every header of the answer set here, so that the gateway knows
	// them all (Go's server adds none that are set).
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(answer)))
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	h.Set("X-Gateway-Ref", fmt.Sprintf("gw-%s-%d", id, n))
	g.answers[id] = append(g.answers[id], gatewayAnswer{status: status, bodySHA256: sink.SHA256Hex([]byte(answer)),
		headersSHA256: sink.HeadersDigest(h), signature: r.Header.Get("Webhook-Signature"), requestSHA256: sink.SHA256Hex(body)})
	g.mu.Unlock()
	w.WriteHeader(status)
	_, _ = io.WriteString(w, answer)
}

func (g *receiptGateway) of(id string) []gatewayAnswer {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]gatewayAnswer(nil), g.answers[id]...)
}

// auditReceipt runs `outbox audit receipt --json` and decodes its answer.
func auditReceipt(t *testing.T, dsn, table, id string, args ...string) (DeliveryReceipt, *sink.Receipt) {
	t.Helper()
	out := mustCLI(t, "", append([]string{"audit", "receipt", id, "--json", "--db", dsn, "--table", table}, args...)...)
	var d DeliveryReceipt
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("audit receipt --json printed %q: %v", out, err)
	}
	r, err := sink.DecodeReceipt(d.Receipt)
	if err != nil {
		t.Fatalf("audit receipt --json: receipt %s: %v", d.Receipt, err)
	}
	t.Logf("outbox audit receipt %s --json %s:\n%s", id, strings.Join(args, " "), out)
	return d, r
}

// TestAuditReceiptHTTP: an HTTP delivery refused once (503) and then
// accepted; `outbox audit receipt` prints the status and the digests of
// the body and headers the gateway actually returned and the signature it
// got, for the delivery and (--attempt 1) for the refusal; `events show`
// prints both receipts.
func TestAuditReceiptHTTP(t *testing.T) {
	t.Setenv("OUTBOX_TEST_RECEIPT_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			dsn, table := bc.dsn(t), newTable()
			gw := &receiptGateway{answers: map[string][]gatewayAnswer{}}
			srv := httptest.NewServer(gw)
			defer srv.Close()
			mustCLI(t, "", "migrate", "--db", dsn, "--table", table)
			id := strings.TrimSpace(mustCLI(t, eventLines(1, 1, ""), "enqueue", "--db", dsn, "--table", table))
			mustCLI(t, "", "relay", "--db", dsn, "--table", table, "--sink", srv.URL+"/approve?sign_secret_env=OUTBOX_TEST_RECEIPT_SECRET",
				"--drain", "--poll-interval", "10ms", "--backoff-min", "5ms", "--backoff-max", "20ms", "--relay-id", "relay-receipts")
			seen := gw.of(id)
			if len(seen) != 2 {
				t.Fatalf("the gateway got %d requests for %s, want 2 (a 503, then a 200)", len(seen), id)
			}
			for i, want := range []struct{ attempt, status int }{{0, 200}, {1, 503}} {
				var args []string
				if want.attempt != 0 {
					args = []string{"--attempt", strconv.Itoa(want.attempt)}
				}
				d, r := auditReceipt(t, dsn, table, id, args...)
				g := seen[1-i]
				if r.Kind != "http" || r.Destination != srv.URL+"/approve" || r.HTTP == nil || r.HTTP.Status != g.status || r.HTTP.Status != want.status {
					t.Fatalf("receipt %s, want an http receipt of status %d from %s/approve", d.Receipt, g.status, srv.URL)
				}
				if r.HTTP.BodySHA256 != g.bodySHA256 || r.HTTP.HeadersSHA256 != g.headersSHA256 || r.HTTP.Signature != g.signature || g.signature == "" {
					t.Fatalf("receipt %s; the gateway answered a body of digest %s and headers of digest %s to a request signed %q",
						d.Receipt, g.bodySHA256, g.headersSHA256, g.signature)
				}
				if d.EventID != id || d.PayloadSHA256 != g.requestSHA256 || d.AggregateID != "tx-0" || d.RelayID != "relay-receipts" {
					t.Fatalf("receipt of %s: %+v; the gateway got a body of digest %s", id, d, g.requestSHA256)
				}
			}
			text := mustCLI(t, "", "audit", "receipt", id, "--db", dsn, "--table", table)
			for _, want := range []string{"http status 200", "body sha256 " + seen[1].bodySHA256, "signature " + seen[1].signature, "attempt 2 (DELIVERED)"} {
				if !hasLine(text, want) {
					t.Errorf("audit receipt printed:\n%s\nwant a line with %q", text, want)
				}
			}
			t.Logf("outbox audit receipt %s:\n%s", id, text)
			show := mustCLI(t, "", "events", "show", id, "--db", dsn, "--table", table)
			if !strings.Contains(show, "receipt of attempt 1 (RETRY): destination http "+srv.URL+"/approve, http status 503") ||
				!strings.Contains(show, "receipt of attempt 2 (DELIVERED): destination http "+srv.URL+"/approve, http status 200") {
				t.Errorf("events show:\n%s\nwant the receipts of both attempts", show)
			}
			t.Logf("outbox events show %s:\n%s", id, show)
			// Once the event moved into the history, its receipts read back
			// from there, the same.
			mustCLI(t, "", "history", "move", "--older-than", "0", "--db", dsn, "--table", table)
			for i, want := range []struct{ attempt, status int }{{0, 200}, {1, 503}} {
				var args []string
				if want.attempt != 0 {
					args = []string{"--attempt", strconv.Itoa(want.attempt)}
				}
				d, r := auditReceipt(t, dsn, table, id, args...)
				g := seen[1-i]
				if r.HTTP == nil || r.HTTP.Status != want.status || r.HTTP.BodySHA256 != g.bodySHA256 || r.HTTP.Signature != g.signature {
					t.Fatalf("receipt of attempt %d of the moved event: %s; want the one the gateway answered (status %d)", want.attempt, d.Receipt, g.status)
				}
			}
			moved := mustCLI(t, "", "audit", "receipt", id, "--db", dsn, "--table", table)
			for _, want := range []string{"http status 200", "body sha256 " + seen[1].bodySHA256, "signature " + seen[1].signature, "attempt 2 (DELIVERED)"} {
				if !hasLine(moved, want) {
					t.Errorf("audit receipt of the moved event printed:\n%s\nwant a line with %q", moved, want)
				}
			}
		})
	}
}

// TestAuditReceiptKafka: a Kafka delivery to kfake; `outbox audit receipt`
// prints the partition and offset the broker assigned to the record, as a
// consumer reads them back.
func TestAuditReceiptKafka(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			k := newKafka(t)
			addr := k.ListenAddrs()[0]
			mustCLI(t, "", "migrate", "--db", dsn, "--table", table)
			ids := strings.Fields(mustCLI(t, eventLines(3, 1, ""), "enqueue", "--db", dsn, "--table", table))
			mustCLI(t, "", "relay", "--db", dsn, "--table", table, "--sink", "kafka://"+addr, "--drain", "--poll-interval", "10ms",
				"--relay-id", "relay-receipts")
			type at struct {
				partition int32
				offset    int64
				valueSHA  string
			}
			written := map[string]at{}
			cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("payment.events"),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for len(written) < len(ids) {
				fs := cl.PollFetches(ctx)
				if ctx.Err() != nil {
					t.Fatalf("read %d of %d records within a minute", len(written), len(ids))
				}
				fs.EachRecord(func(r *kgo.Record) {
					for _, h := range r.Headers {
						if h.Key == "outbox-event-id" {
							written[string(h.Value)] = at{r.Partition, r.Offset, sink.SHA256Hex(r.Value)}
						}
					}
				})
			}
			for _, id := range ids {
				d, r := auditReceipt(t, dsn, table, id)
				w, ok := written[id]
				if !ok || r.Kind != "kafka" || r.Kafka == nil || r.Kafka.Topic != "payment.events" ||
					r.Kafka.Partition != w.partition || r.Kafka.Offset != w.offset || r.Kafka.Error != "" || d.PayloadSHA256 != w.valueSHA {
					t.Fatalf("receipt of %s: %+v; the broker wrote it at partition %d offset %d, its value of digest %s (found: %v)",
						id, d, w.partition, w.offset, w.valueSHA, ok)
				}
			}
			text := mustCLI(t, "", "audit", "receipt", ids[2], "--db", dsn, "--table", table)
			if w := written[ids[2]]; !hasLine(text, fmt.Sprintf("offset %d", w.offset)) ||
				!hasLine(text, fmt.Sprintf("partition %d", w.partition)) {
				t.Errorf("audit receipt printed:\n%s\nwant partition %d and offset %d", text, w.partition, w.offset)
			}
			t.Logf("outbox audit receipt %s:\n%s", ids[2], text)
		})
	}
}

// hasLine reports whether a line of text starts with the words of want,
// whatever the spaces between them.
func hasLine(text, want string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.Join(strings.Fields(line), " "), want) {
			return true
		}
	}
	return false
}

// TestAuditReceiptBadInput: a malformed id, a negative attempt, an unknown
// event and an event without a receipt each get an error that says what
// is wrong, and exit non-zero.
func TestAuditReceiptBadInput(t *testing.T) {
	dsn, table := "sqlite://"+t.TempDir()+"/outbox.db", newTable()
	mustCLI(t, "", "migrate", "--db", dsn, "--table", table)
	id := strings.TrimSpace(mustCLI(t, eventLines(1, 1, ""), "enqueue", "--db", dsn, "--table", table))
	mustCLI(t, "", "relay", "--db", dsn, "--table", table, "--sink", "discard://", "--drain", "--poll-interval", "10ms")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"not-a-uuid"}, "not-a-uuid"},
		{[]string{id, "--attempt=-1"}, "--attempt -1"},
		{[]string{"01a252b6-2bb4-74ab-883a-d3569253c657"}, "01a252b6-2bb4-74ab-883a-d3569253c657"},
		{[]string{id}, "has no delivery receipt (status PROCESSED)"},
		{[]string{id, "--attempt", "2"}, "no receipt for attempt 2"},
	} {
		out, errOut, code := cli(t, "", append([]string{"audit", "receipt", "--db", dsn, "--table", table}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("audit receipt %v: exit %d, stdout %q, stderr %q; want an error naming %q", tc.args, code, out, errOut, tc.want)
		}
	}
}
