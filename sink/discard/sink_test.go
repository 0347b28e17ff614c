package discard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
)

func message(aggID string, n int) outbox.Message {
	return outbox.Message{
		ID: int64(n + 1), EventID: outbox.NewEventID(), AggregateType: "payment", AggregateID: aggID,
		EventType: "ApprovalRequested", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), Attempt: 1,
	}
}

func TestPublishCounts(t *testing.T) {
	t.Parallel()
	var s Sink // the zero value works
	msgs := []outbox.Message{message("a", 0), message("a", 1), message("b", 2)}
	for i, err := range s.Publish(t.Context(), msgs) {
		if err != nil {
			t.Errorf("message %d: %v", i, err)
		}
	}
	if got := s.Publish(t.Context(), nil); len(got) != 0 {
		t.Errorf("Publish(nil) = %v, want no results", got)
	}
	if s.Count() != 3 {
		t.Errorf("Count = %d, want 3", s.Count())
	}
}

func TestConcurrentPublishCountsEverything(t *testing.T) {
	t.Parallel()
	s := New()
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Go(func() {
			for i := range 100 {
				if err := s.Publish(t.Context(), []outbox.Message{message(fmt.Sprint(c), i)})[0]; err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if s.Count() != 800 {
		t.Errorf("Count = %d, want 800", s.Count())
	}
}

func TestExpiredMessageIsNotTaken(t *testing.T) {
	t.Parallel()
	s := New()
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
	if s.Count() != 1 {
		t.Errorf("Count = %d, want 1", s.Count())
	}
}

func TestCancelledContextTakesNothing(t *testing.T) {
	t.Parallel()
	s := New()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for i, err := range s.Publish(ctx, []outbox.Message{message("a", 0), message("b", 1)}) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("message %d: err = %v, want context.Canceled", i, err)
		}
	}
	if s.Count() != 0 {
		t.Errorf("Count = %d, want 0", s.Count())
	}
}

func TestPublishAfterCloseFailsWithErrClosed(t *testing.T) {
	t.Parallel()
	s := New()
	s.Publish(t.Context(), []outbox.Message{message("a", 0)})
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for i, err := range s.Publish(t.Context(), []outbox.Message{message("a", 1), message("b", 2)}) {
		if err != outbox.ErrClosed {
			t.Errorf("message %d: err = %v, want outbox.ErrClosed", i, err)
		}
	}
	if s.Count() != 1 {
		t.Errorf("Count = %d, want 1: nothing is counted after Close", s.Count())
	}
}

func BenchmarkPublish(b *testing.B) {
	s := New()
	msgs := make([]outbox.Message, 500)
	for i := range msgs {
		msgs[i] = message(fmt.Sprint(i%50), i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s.Publish(ctx, msgs)
	}
}
