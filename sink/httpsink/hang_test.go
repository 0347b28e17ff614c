package httpsink

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// TestPublishToHangingReceiver: a receiver that accepts requests and never
// answers makes each request give up at Timeout with a destination fault,
// reported as it happens (the relay's breaker counts it then, not when
// the batch is done).
func TestPublishToHangingReceiver(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	s := newSink(t, Config{URL: srv.URL, Timeout: time.Second})
	msgs := []outbox.Message{message("a", 1), message("b", 1), message("a", 2)}
	if _, reported := sinktest.PublishToHang(t, s, msgs, waitLimit); reported < 2 {
		t.Errorf("%d results reported before Publish returned, want the 2 requests sent", reported)
	}
}
