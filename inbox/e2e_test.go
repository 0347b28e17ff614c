package inbox_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txoutbox/outbox/inbox"
	"github.com/txoutbox/outbox/inbox/internal/paidtwice"
	"github.com/txoutbox/outbox/internal/testenv"
)

// TestPaidTwiceHTTP: the real relay delivers a backlog of payment events
// over HTTP to a consumer behind the inbox middleware, which charges a
// card (one row) per event in its own PostgreSQL transaction. The relay is
// SIGKILLed mid-batch several times, so events are delivered again; every
// event is charged exactly once, and the inbox counted each repeat.
func TestPaidTwiceHTTP(t *testing.T) {
	t.Parallel()
	n, kills := 2000, 3
	if testenv.Short() {
		n, kills = 400, 2
	}
	f := paidtwice.New(t, "inbox_http_e2e", n)
	mw, err := f.Inbox.Middleware(inbox.MiddlewareConfig{Consumer: "card-charger"})
	if err != nil {
		t.Fatal(err)
	}
	charge := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := f.Charge(r.Context(), inbox.SQLTx(r.Context()), r.Header.Get("Outbox-Event-Id")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"charged":1000}`)
	}))
	var deliveries atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deliveries.Add(1)
		// The charge completes even if the relay hangs up (it was killed):
		// that delivery is then one the relay makes again.
		charge.ServeHTTP(w, r.WithContext(context.WithoutCancel(r.Context())))
	}))
	defer srv.Close()

	// The deadline bounds a hang: on a loaded machine the kills, the drain
	// and one consumer transaction per delivery take minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	f.Run(ctx, srv.URL+"/charge", kills)
	f.Check(ctx, "HTTP", deliveries.Load())
}
