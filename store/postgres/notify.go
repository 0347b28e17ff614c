package postgres

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgxlisten"
	"github.com/txoutbox/outbox/store/internal/backend"
)

// DefaultNotifyDebounce is the shortest gap between two NOTIFYs sent by one
// Store's Enqueue calls.
const DefaultNotifyDebounce = 5 * time.Millisecond

// notifier debounces the NOTIFYs of Enqueue and fans out in-process
// enqueue signals.
//
// A NOTIFY inside every producer transaction serializes their commits:
// each transaction that notified takes PostgreSQL's notification queue
// lock in turn as it commits. So only the first Enqueue of each debounce
// window carries one, inside its
// transaction (it fires exactly at commit); if more Enqueues follow in the
// window, one trailing NOTIFY is sent outside any producer transaction at
// the end of the window, when those transactions have most likely
// committed. Polling still bounds the latency of anything a wake-up misses.
type notifier struct {
	channel  string
	debounce time.Duration
	lastSent atomic.Int64 // unix nanoseconds of the last in-transaction NOTIFY
	trailing atomic.Bool  // a trailing NOTIFY is scheduled
	send     func(ctx context.Context) error

	observers backend.EnqueueObservers
}

// claimInTx reports whether this Enqueue should carry the NOTIFY in its
// transaction; when it should not, it makes sure a trailing one follows.
func (n *notifier) claimInTx(ctx context.Context, now time.Time) bool {
	if n.debounce <= 0 {
		return true
	}
	last := n.lastSent.Load()
	if now.UnixNano()-last >= int64(n.debounce) && n.lastSent.CompareAndSwap(last, now.UnixNano()) {
		return true
	}
	if n.trailing.CompareAndSwap(false, true) {
		// The producer's call has returned by then: keep its values, not
		// its cancellation.
		detached := context.WithoutCancel(ctx)
		time.AfterFunc(n.debounce, func() {
			n.trailing.Store(false)
			ctx, cancel := context.WithTimeout(detached, 5*time.Second)
			defer cancel()
			_ = n.send(ctx) // best effort: polling covers a lost wake-up
		})
	}
	return false
}

func (n *notifier) enqueued() { n.observers.Notify() }

// OnEnqueue implements store.EnqueueObserver: f runs after each successful
// Enqueue through this Store, before the producer commits.
func (s *Store) OnEnqueue(f func()) (remove func()) { return s.notify.observers.Add(f) }

// Listen implements store.Listener: it LISTENs on the outbox's channel on a
// connection of its own (not one of the pool's) and calls wake for every
// notification, and once after each (re)connect. It returns when ctx ends.
func (s *Store) Listen(ctx context.Context, wake func()) error {
	l := &pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			return pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
		},
		LogError: func(ctx context.Context, err error) {
			if ctx.Err() == nil {
				s.log.Warn("LISTEN connection lost; polling continues until it is back", "channel", s.notify.channel, "err", err)
			}
		},
		ReconnectDelay: 2 * time.Second,
	}
	l.Handle(s.notify.channel, listenHandler{wake})
	err := l.Listen(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

type listenHandler struct{ wake func() }

func (h listenHandler) HandleNotification(context.Context, *pgconn.Notification, *pgx.Conn) error {
	h.wake()
	return nil
}

// HandleBacklog runs after each (re)connect: notifications sent while
// disconnected are lost, so wake once.
func (h listenHandler) HandleBacklog(context.Context, string, *pgx.Conn) error {
	h.wake()
	return nil
}
