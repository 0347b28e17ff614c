package stdoutsink_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/txoutbox/outbox/sink/sinktest"
	"github.com/txoutbox/outbox/sink/stdoutsink"
)

// lockedBuffer is a concurrency-safe writer the test can read back.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		out = append(out, append([]byte(nil), sc.Bytes()...))
	}
	return out
}

func TestConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Features{OrderedPerKey: true}, func(t *testing.T) *sinktest.Harness {
		buf := &lockedBuffer{}
		return &sinktest.Harness{
			Sink: stdoutsink.New(stdoutsink.Config{Writer: buf}),
			// Publish writes synchronously, so what arrived is what is in the buffer.
			Read: func(ctx context.Context, n int) ([]sinktest.Received, error) {
				var out []sinktest.Received
				for _, line := range buf.lines() {
					var l struct {
						EventID       string            `json:"event_id"`
						AggregateType string            `json:"aggregate_type"`
						AggregateID   string            `json:"aggregate_id"`
						EventType     string            `json:"event_type"`
						Headers       map[string]string `json:"headers"`
						Payload       json.RawMessage   `json:"payload"`
					}
					if err := json.Unmarshal(line, &l); err != nil {
						return out, err
					}
					out = append(out, sinktest.Received{EventID: l.EventID, AggregateType: l.AggregateType,
						AggregateID: l.AggregateID, EventType: l.EventType, Headers: l.Headers, Payload: l.Payload})
				}
				return out, nil
			},
			RouteOf: func(sinktest.Received) string { return "stdout" },
		}
	})
}
