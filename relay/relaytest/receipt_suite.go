package relaytest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/storetest"
)

// receiptSink answers the first attempt of each event of aggregate "r"
// with a 503 and the next with a 200, and records a receipt for each
// answer naming the event and the attempt; it delivers the events of
// other aggregates without a receipt.
type receiptSink struct {
	mu   sync.Mutex
	seen map[outbox.EventID]int
}

func (s *receiptSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	out := make([]error, len(msgs))
	failed := map[string]bool{}
	for i := range msgs {
		m := &msgs[i]
		if failed[m.OrderingKey()] {
			out[i] = fmt.Errorf("earlier message of the key failed: %w", outbox.ErrNotAttempted)
			continue
		}
		if m.AggregateID != "r" {
			continue
		}
		s.mu.Lock()
		s.seen[m.EventID]++
		n := s.seen[m.EventID]
		s.mu.Unlock()
		status := 200
		if n == 1 {
			status = 503
			out[i] = outbox.Retryable(fmt.Errorf("status 503"), 0)
			failed[m.OrderingKey()] = true
		}
		sink.RecordReceipt(ctx, m, &sink.Receipt{Kind: "http", Destination: "https://gateway.example/" + m.EventID.String() + "/" + strconv.Itoa(n),
			AnsweredAt: time.Now().UTC(), HTTP: &sink.HTTPReceipt{Status: status}})
	}
	return out
}

func (s *receiptSink) Close(context.Context) error { return nil }

// testReceiptsInAuditTrail: the receipt a sink records for a message ends
// in that event's attempt, a refusal's in its RETRY row and a delivery's
// with the DELIVERED one, and an event whose sink recorded none has none.
func testReceiptsInAuditTrail(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	ids := storetest.Enqueue(t, h, storetest.PaymentEvent("r", 1), storetest.PaymentEvent("plain", 1), storetest.PaymentEvent("r", 2))
	s := &receiptSink{seen: map[outbox.EventID]int{}}
	drain(t, newRelay(t, testConfig(h, s, "receipts")), time.Minute)
	for _, id := range ids {
		atts, err := h.Store.Attempts(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, a := range atts {
			if a.Outcome == store.Released {
				continue
			}
			r := "none"
			if a.Receipt != nil {
				rc, err := sink.DecodeReceipt(a.Receipt)
				if err != nil {
					t.Fatalf("event %s: receipt %q: %v", id, a.Receipt, err)
				}
				r = fmt.Sprintf("%d %s", rc.HTTP.Status, rc.Destination)
			}
			got = append(got, string(a.Outcome)+" "+r)
		}
		want := fmt.Sprint([]string{"DELIVERED none"})
		if id != ids[1] {
			want = fmt.Sprint([]string{"RETRY 503 https://gateway.example/" + id.String() + "/1",
				"DELIVERED 200 https://gateway.example/" + id.String() + "/2"})
		}
		if fmt.Sprint(got) != want {
			t.Errorf("event %s: attempts %v, want %s", id, got, want)
		}
	}
}
