package sinktest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
)

// ReceiptLog collects the receipts a sink records (sink.RecordReceipt) in
// the context Context returns, by event id.
type ReceiptLog struct {
	mu   sync.Mutex
	byID map[outbox.EventID][]*sink.Receipt
}

// Context returns a copy of ctx whose receipts go to the log.
func (l *ReceiptLog) Context(ctx context.Context) context.Context {
	return sink.WithReceiptFunc(ctx, func(m *outbox.Message, r *sink.Receipt) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.byID == nil {
			l.byID = map[outbox.EventID][]*sink.Receipt{}
		}
		l.byID[m.EventID] = append(l.byID[m.EventID], r)
	})
}

// Of returns the receipts recorded for event id.
func (l *ReceiptLog) Of(id outbox.EventID) []*sink.Receipt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byID[id]
}

// Len is the number of receipts recorded.
func (l *ReceiptLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, rs := range l.byID {
		n += len(rs)
	}
	return n
}

// testReceipts checks Features.Receipts: a sink that declares a kind of
// receipt records exactly one, of that kind, for each message the
// destination acknowledged, for that message; a sink that declares none
// records none.
func testReceipts(kind string) func(*testing.T, *Harness) {
	return func(t *testing.T, h *Harness) {
		var msgs []outbox.Message
		for i := 0; i < 6; i++ {
			msgs = append(msgs, Message(fmt.Sprintf("r%d", i%3), i/3))
		}
		var log ReceiptLog
		ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
		defer cancel()
		res := h.Sink.Publish(log.Context(ctx), msgs)
		for i, err := range res {
			if err != nil {
				t.Fatalf("Publish result %d: %v", i, err)
			}
		}
		if kind == "" {
			if n := log.Len(); n != 0 {
				t.Fatalf("the sink declares no receipts but recorded %d", n)
			}
			return
		}
		if n := log.Len(); n != len(msgs) {
			t.Fatalf("recorded %d receipts for %d acknowledged messages, want one each", n, len(msgs))
		}
		for _, m := range msgs {
			rs := log.Of(m.EventID)
			if len(rs) != 1 {
				t.Fatalf("event %s has %d receipts, want 1", m.EventID, len(rs))
			}
			r := rs[0]
			if r.Kind != kind || r.Destination == "" || r.AnsweredAt.IsZero() {
				t.Fatalf("event %s: receipt %s: want kind %q, a destination and a time", m.EventID, r.Encode(), kind)
			}
			back, err := sink.DecodeReceipt(r.Encode())
			if err != nil || string(back.Encode()) != string(r.Encode()) {
				t.Fatalf("receipt %s does not survive its encoding: %v", r.Encode(), err)
			}
			if d, ok := h.Sink.(sink.Destinations); ok && r.Destination != d.Destination(&m) {
				t.Fatalf("event %s: receipt names destination %q, the sink routes it to %q", m.EventID, r.Destination, d.Destination(&m))
			}
		}
	}
}
