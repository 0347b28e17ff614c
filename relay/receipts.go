package relay

import (
	"sync"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
)

// receiptLog collects the receipts a sink records during one Publish call
// (sink.RecordReceipt), encoded, by event id: the relay passes each one
// with its event's outcome into the completion. Nothing is allocated for
// a sink that records none.
type receiptLog struct {
	mu   sync.Mutex
	byID map[outbox.EventID][]byte
}

// add is the batch's sink.ReceiptFunc. A second receipt for one message
// replaces the first (the last answer is the one the result reports).
func (l *receiptLog) add(m *outbox.Message, r *sink.Receipt) {
	if r == nil {
		return
	}
	b := r.Encode()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byID == nil {
		l.byID = make(map[outbox.EventID][]byte)
	}
	l.byID[m.EventID] = b
}

// of returns the receipt recorded for event id, nil when none was.
func (l *receiptLog) of(id outbox.EventID) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byID[id]
}
