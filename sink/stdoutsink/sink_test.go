package stdoutsink

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
)

func message(aggID string, n int) outbox.Message {
	return outbox.Message{
		ID:            int64(n + 1),
		EventID:       outbox.NewEventID(),
		AggregateType: "payment",
		AggregateID:   aggID,
		EventType:     "ApprovalRequested",
		Payload:       json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)),
		Attempt:       1,
		CreatedAt:     time.Now(),
	}
}

// lockedBuffer is a writer that records each Write call.
type lockedBuffer struct {
	mu     sync.Mutex
	writes []string
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.writes = append(b.writes, string(p))
	return len(p), nil
}

func (b *lockedBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSuffix(strings.Join(b.writes, ""), "\n"), "\n")
}

func TestLineFormat(t *testing.T) {
	t.Parallel()
	id, err := outbox.ParseEventID("0190b6c8-8a2e-7c3e-9f1a-2b3c4d5e6f70")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	s := New(Config{Writer: &buf})
	msgs := []outbox.Message{{
		ID: 42, EventID: id, AggregateType: "payment", AggregateID: "tx-1", EventType: "ApprovalRequested",
		Payload:   json.RawMessage("{\n  \"amount\": 1000,\n  \"memo\": \"<b>caf\\u00e9 & é</b>\"\n}"),
		Headers:   map[string]string{"traceparent": "00-abc-def-01", "correlation_id": "c-1"},
		Attempt:   2,
		CreatedAt: time.Date(2026, 3, 1, 21, 0, 0, 500, time.FixedZone("KST", 9*3600)),
	}, {
		ID: 43, EventID: id, AggregateType: "payment", AggregateID: "tx-2", EventType: "Approved",
		Payload: json.RawMessage(`[1,2]`), Attempt: 1,
		CreatedAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
	}}
	for i, err := range s.Publish(t.Context(), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	want := `{"id":42,"event_id":"0190b6c8-8a2e-7c3e-9f1a-2b3c4d5e6f70","aggregate_type":"payment","aggregate_id":"tx-1","event_type":"ApprovalRequested","attempt":2,"created_at":"2026-03-01T12:00:00.0000005Z","headers":{"correlation_id":"c-1","traceparent":"00-abc-def-01"},"payload":{"amount":1000,"memo":"<b>caf\u00e9 & é</b>"}}
{"id":43,"event_id":"0190b6c8-8a2e-7c3e-9f1a-2b3c4d5e6f70","aggregate_type":"payment","aggregate_id":"tx-2","event_type":"Approved","attempt":1,"created_at":"2026-03-01T12:00:00Z","payload":[1,2]}
`
	if buf.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", buf.String(), want)
	}
}

func TestConcurrentPublishNeverInterleaves(t *testing.T) {
	t.Parallel()
	var out lockedBuffer
	s := New(Config{Writer: &out})
	const callers, perCaller = 8, 50
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			var msgs []outbox.Message
			for i := range perCaller {
				msgs = append(msgs, message(fmt.Sprintf("caller-%d", c), i))
			}
			for i, err := range s.Publish(t.Context(), msgs) {
				if err != nil {
					t.Errorf("caller %d message %d: %v", c, i, err)
				}
			}
		})
	}
	wg.Wait()
	lines := out.lines()
	if len(lines) != callers*perCaller {
		t.Fatalf("%d lines, want %d", len(lines), callers*perCaller)
	}
	next := make(map[string]int)
	for _, l := range lines {
		var got struct {
			AggregateID string `json:"aggregate_id"`
			Payload     struct{ N int }
		}
		if err := json.Unmarshal([]byte(l), &got); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", l, err)
		}
		if got.Payload.N != next[got.AggregateID] {
			t.Errorf("%s: line %d arrived when %d was due", got.AggregateID, got.Payload.N, next[got.AggregateID])
		}
		next[got.AggregateID] = got.Payload.N + 1
	}
	for _, w := range out.writes {
		if strings.Count(w, "\n") != 1 || !strings.HasSuffix(w, "\n") {
			t.Fatalf("a Write call was not exactly one line: %q", w)
		}
	}
}

// failingWriter accepts ok writes, then fails every write.
type failingWriter struct {
	ok     int
	writes int
	buf    bytes.Buffer
}

func (w *failingWriter) Write(p []byte) (int, error) {
	w.writes++
	if w.writes > w.ok {
		return 0, errors.New("disk full")
	}
	return w.buf.Write(p)
}

func TestWriteErrorIsRetryableAndStopsTheAggregate(t *testing.T) {
	t.Parallel()
	w := &failingWriter{ok: 1}
	s := New(Config{Writer: w})
	errs := s.Publish(t.Context(), []outbox.Message{message("a", 0), message("a", 1), message("a", 2), message("b", 3)})
	if errs[0] != nil {
		t.Errorf("first message: %v", errs[0])
	}
	var pe *outbox.PublishError
	if !errors.As(errs[1], &pe) || !pe.Retryable || !strings.Contains(errs[1].Error(), "disk full") {
		t.Errorf("failed write: err = %v, want retryable with the cause", errs[1])
	}
	if !errors.Is(errs[2], outbox.ErrNotAttempted) {
		t.Errorf("later message of the aggregate: err = %v, want ErrNotAttempted", errs[2])
	}
	if errs[3] == nil || errors.Is(errs[3], outbox.ErrNotAttempted) {
		t.Errorf("other aggregate, writer still failing: err = %v, want a write error", errs[3])
	}
	if w.writes != 3 {
		t.Errorf("%d writes, want 3 (the aggregate's later message must not be written)", w.writes)
	}
}

func TestInvalidPayloadIsPermanent(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	s := New(Config{Writer: &buf})
	bad := message("a", 0)
	bad.Payload = json.RawMessage(`{"unterminated":`)
	errs := s.Publish(t.Context(), []outbox.Message{bad, message("a", 1), message("b", 2)})
	if !outbox.IsPermanent(errs[0]) {
		t.Errorf("invalid payload: err = %v, want permanent", errs[0])
	}
	if !errors.Is(errs[1], outbox.ErrNotAttempted) {
		t.Errorf("next message of the aggregate: err = %v, want ErrNotAttempted", errs[1])
	}
	if errs[2] != nil {
		t.Errorf("other aggregate: err = %v, want nil", errs[2])
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Errorf("%d lines written, want 1", n)
	}
}

func TestEmptyPayloadIsNull(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	m := message("a", 0)
	m.Payload = json.RawMessage{}
	if err := New(Config{Writer: &buf}).Publish(t.Context(), []outbox.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(buf.String(), `"payload":null}`+"\n") {
		t.Errorf("line = %q, want payload null", buf.String())
	}
}

func TestExpiredEventIsNotWritten(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	s := New(Config{Writer: &buf})
	expired := message("a", 0)
	expired.Deadline = time.Now().Add(-time.Millisecond)
	live := message("b", 2)
	live.Deadline = time.Now().Add(time.Hour)
	errs := s.Publish(t.Context(), []outbox.Message{expired, message("a", 1), live})
	if !errors.Is(errs[0], context.DeadlineExceeded) {
		t.Errorf("expired: err = %v, want context.DeadlineExceeded", errs[0])
	}
	if !errors.Is(errs[1], outbox.ErrNotAttempted) {
		t.Errorf("after the expired one: err = %v, want ErrNotAttempted", errs[1])
	}
	if errs[2] != nil {
		t.Errorf("live: err = %v, want nil", errs[2])
	}
	if !strings.Contains(buf.String(), live.EventID.String()) || strings.Count(buf.String(), "\n") != 1 {
		t.Errorf("output = %q, want only the live event", buf.String())
	}
}

func TestCancelledContextWritesNothing(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	s := New(Config{Writer: &buf})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for i, err := range s.Publish(ctx, []outbox.Message{message("a", 0), message("b", 1)}) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("message %d: err = %v, want context.Canceled", i, err)
		}
	}
	if buf.Len() != 0 {
		t.Errorf("wrote %q after the context was cancelled", buf.String())
	}
}

func TestBufferedWriterIsFlushed(t *testing.T) {
	t.Parallel()
	var under bytes.Buffer
	bw := bufio.NewWriterSize(&under, 1<<16)
	s := New(Config{Writer: bw})
	if err := s.Publish(t.Context(), []outbox.Message{message("a", 0)})[0]; err != nil {
		t.Fatal(err)
	}
	if strings.Count(under.String(), "\n") != 1 {
		t.Errorf("after Publish the underlying writer holds %q, want the line (Publish flushes)", under.String())
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestFlushErrorFailsTheWrittenMessages(t *testing.T) {
	t.Parallel()
	bw := bufio.NewWriterSize(&failingWriter{}, 1<<16)
	s := New(Config{Writer: bw})
	for i, err := range s.Publish(t.Context(), []outbox.Message{message("a", 0), message("b", 1)}) {
		var pe *outbox.PublishError
		if !errors.As(err, &pe) || !pe.Retryable || !strings.Contains(err.Error(), "flush") {
			t.Errorf("message %d: err = %v, want a retryable flush error", i, err)
		}
	}
}

func TestPublishAfterCloseFailsWithErrClosed(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	s := New(Config{Writer: &buf})
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for i, err := range s.Publish(t.Context(), []outbox.Message{message("a", 0), message("b", 1)}) {
		if err != outbox.ErrClosed {
			t.Errorf("message %d: err = %v, want outbox.ErrClosed", i, err)
		}
	}
	if buf.Len() != 0 {
		t.Errorf("wrote %q after Close", buf.String())
	}
}

// blockingWriter blocks every Write until release is closed.
type blockingWriter struct {
	started chan struct{}
	release chan struct{}
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	w.started <- struct{}{}
	<-w.release
	return len(p), nil
}

func TestCloseAndPublishGiveUpWithTheirContext(t *testing.T) {
	t.Parallel()
	w := &blockingWriter{started: make(chan struct{}, 1), release: make(chan struct{})}
	s := New(Config{Writer: w})
	done := make(chan []error)
	go func() { done <- s.Publish(t.Context(), []outbox.Message{message("a", 0)}) }()
	select {
	case <-w.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the write never started")
	}
	// A second Publish waits for the first; its context ends first.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if err := s.Publish(ctx, []outbox.Message{message("b", 1)})[0]; !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, outbox.ErrNotAttempted) {
		t.Errorf("waiting Publish: err = %v, want DeadlineExceeded and ErrNotAttempted", err)
	}
	if err := s.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want DeadlineExceeded while a write is blocked", err)
	}
	if err := s.Publish(t.Context(), []outbox.Message{message("c", 2)})[0]; err != outbox.ErrClosed {
		t.Errorf("Publish after Close: err = %v, want ErrClosed", err)
	}
	close(w.release)
	select {
	case errs := <-done:
		if errs[0] != nil {
			t.Errorf("the blocked write: err = %v, want nil once it completed", errs[0])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Publish did not return after the write completed")
	}
}

func TestDefaultWriterIsStdout(t *testing.T) {
	t.Parallel()
	if s := New(Config{}); s.w != os.Stdout {
		t.Errorf("default writer = %v, want os.Stdout", s.w)
	}
}
