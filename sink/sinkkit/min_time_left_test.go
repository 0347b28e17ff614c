package sinkkit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
)

// min_time_left: read from the URL and --route-limit, and a message with
// less time left than that is not sent (nor the later ones of its
// aggregate), with the reason; a message with enough, or without a
// deadline, goes; another route is not affected.
func TestMinTimeLeft(t *testing.T) {
	rest, l, err := CutLimits("https://gw.example/approve?min_time_left=2s&x=1")
	if err != nil || rest != "https://gw.example/approve?x=1" || l.MinTimeLeft != 2*time.Second || l.IsZero() {
		t.Fatalf("CutLimits = %q, %+v, %v", rest, l, err)
	}
	if got := l.String(); got != "min_time_left=2s" {
		t.Errorf("String() = %q", got)
	}
	if _, l2, err := ParseRouteLimit("fast.events=min_time_left=0", l); err != nil || l2.MinTimeLeft != 0 {
		t.Errorf("min_time_left=0 for one route = %+v, %v; want it lifted", l2, err)
	}
	for _, bad := range []string{"min_time_left=soon", "min_time_left=-1s"} {
		if _, _, err := CutLimits("https://gw.example/?" + bad); err == nil || !strings.Contains(err.Error(), "min_time_left") {
			t.Errorf("%s: %v, want an error naming min_time_left", bad, err)
		}
	}

	inner := &routed{}
	lim, err := Limit(inner, LimitConfig{Routes: map[string]Limits{"slow.events": {MinTimeLeft: 2 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	short := routedMsg("slow", "a", 1)
	short.Deadline = now.Add(1200 * time.Millisecond)
	behind := routedMsg("slow", "a", 2)
	enough := routedMsg("slow", "b", 3)
	enough.Deadline = now.Add(time.Minute)
	none := routedMsg("slow", "c", 4)
	other := routedMsg("fast", "d", 5)
	other.Deadline = now.Add(time.Second)
	res := lim.Publish(context.Background(), []outbox.Message{short, behind, enough, none, other})
	var tl *sink.TooLateError
	if !errors.As(res[0], &tl) || !errors.Is(res[0], sink.ErrNotEnoughTimeLeft) || !errors.Is(res[0], outbox.ErrNotAttempted) {
		t.Fatalf("1.2 s left on a 2 s route: %v, want a TooLateError", res[0])
	}
	if msg := res[0].Error(); !strings.HasPrefix(msg, "not enough time left: 1.") || !strings.Contains(msg, " s < 2 s") {
		t.Errorf("reason %q, want \"not enough time left: 1.x s < 2 s ...\"", msg)
	}
	if !errors.Is(res[1], outbox.ErrNotAttempted) {
		t.Errorf("the later message of the aggregate: %v, want not attempted", res[1])
	}
	for i := 2; i < 5; i++ {
		if res[i] != nil {
			t.Errorf("message %d: %v, want sent", i, res[i])
		}
	}
	if len(inner.sent) != 3 {
		t.Errorf("%d messages reached the sink, want 3", len(inner.sent))
	}
}
