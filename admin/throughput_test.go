package admin

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/outbox/store"
)

// fakeAttempts answers Throughput from a fixed list of attempts and
// records how far back each call read.
type fakeAttempts struct {
	store.AdminQueries
	now   time.Time
	rows  []store.ThroughputBucket
	asked []time.Duration
}

func (f *fakeAttempts) Throughput(_ context.Context, since time.Duration) ([]store.ThroughputBucket, error) {
	f.asked = append(f.asked, since)
	var out []store.ThroughputBucket
	for _, r := range f.rows {
		if r.Minute.Add(time.Minute).After(f.now.Add(-since)) {
			out = append(out, r)
		}
	}
	return out, nil
}

func TestThroughputCacheReadsTheHourOnceThenTwoMinutes(t *testing.T) {
	now := time.Date(2026, 12, 1, 14, 30, 20, 0, time.UTC)
	f := &fakeAttempts{now: now}
	for i := range 70 { // 70 minutes of 10 deliveries and 1 failure each
		m := now.Truncate(time.Minute).Add(-time.Duration(i) * time.Minute)
		f.rows = append(f.rows, store.ThroughputBucket{Minute: m, Outcome: store.Delivered, Count: 10},
			store.ThroughputBucket{Minute: m, Outcome: store.Failed, Count: 1})
	}
	var c throughputCache
	sum := func(ms []minuteJSON) (d, fl int64) {
		for _, m := range ms {
			d, fl = d+m.Delivered, fl+m.Failed
		}
		return
	}
	first, err := c.read(context.Background(), f, now)
	if err != nil {
		t.Fatal(err)
	}
	if d, fl := sum(first); len(first) != 60 || d != 600 || fl != 60 {
		t.Fatalf("first read: %d minutes, %d delivered, %d failed; want 60, 600, 60", len(first), d, fl)
	}
	if f.asked[0] < 59*time.Minute {
		t.Fatalf("the first read asked for %s, want the hour", f.asked[0])
	}
	// A minute later: 10 more deliveries in the new minute.
	f.now = now.Add(time.Minute)
	f.rows = append(f.rows, store.ThroughputBucket{Minute: f.now.Truncate(time.Minute), Outcome: store.Delivered, Count: 10})
	second, err := c.read(context.Background(), f, f.now)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := sum(second); len(second) != 60 || d != 600 {
		t.Fatalf("second read: %d minutes, %d delivered; want 60 and 600 (the oldest minute left the window)", len(second), d)
	}
	if got := f.asked[1]; got > 2*time.Minute {
		t.Fatalf("the second read asked for %s, want the last minute", got)
	}
}
