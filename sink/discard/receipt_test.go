package discard

import (
	"context"
	"testing"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// Discarded messages got no answer from anyone: no receipt.
func TestNoReceipts(t *testing.T) {
	var log sinktest.ReceiptLog
	s := New()
	res := s.Publish(log.Context(context.Background()), []outbox.Message{sinktest.Message("a", 0), sinktest.Message("b", 0)})
	for i, err := range res {
		if err != nil {
			t.Fatalf("result %d: %v", i, err)
		}
	}
	if n := log.Len(); n != 0 {
		t.Fatalf("discard recorded %d receipts, want none", n)
	}
}
