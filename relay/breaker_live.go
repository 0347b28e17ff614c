package relay

import (
	"context"
	"sync"

	"github.com/txoutbox/outbox"
)

// liveResults feeds the breakers with each result of a batch as the sink
// reports it (sink.ReportResult), while the batch is still publishing: a
// request that fails or exceeds its timeout counts at that moment, and
// when that opens every route the batch sends to, the rest of the batch
// is cut short (its events wait for the probe, no retry counted) rather
// than sent to a destination that is down or hangs.
type liveResults struct {
	ctx    context.Context // the relay's, for the breaker's database calls
	b      *batch
	pctx   context.Context
	cancel context.CancelCauseFunc
	byID   map[outbox.EventID]int // message index by event id
	routes []string               // breaker key of each message
	probe  map[int]bool           // messages that are a route's probe
	sent   map[string]bool        // every route the batch sends to

	mu     sync.Mutex
	seen   []bool // results already counted
	opened map[string]bool
	// settling serializes the decisions to open, so that concurrent
	// faults of one batch make one change, not one per fault.
	settling sync.Mutex
}

func newLiveResults(ctx context.Context, b *batch, msgs []outbox.Message, msgPos []int, probeAt map[string]int,
	pctx context.Context, cancel context.CancelCauseFunc) *liveResults {
	l := &liveResults{ctx: ctx, b: b, pctx: pctx, cancel: cancel,
		byID: make(map[outbox.EventID]int, len(msgs)), routes: make([]string, len(msgs)),
		probe: map[int]bool{}, sent: map[string]bool{}, seen: make([]bool, len(msgs)), opened: map[string]bool{}}
	for mi := range msgs {
		if _, dup := l.byID[msgs[mi].EventID]; !dup {
			l.byID[msgs[mi].EventID] = mi
		}
		l.routes[mi] = breakerKey(b.route(msgPos[mi]))
		l.sent[l.routes[mi]] = true
	}
	for _, mi := range probeAt {
		l.probe[mi] = true
	}
	return l
}

// report is the batch's sink.ResultFunc.
func (l *liveResults) report(m *outbox.Message, err error) {
	r := l.b.relay
	if r.breaker == nil || m == nil {
		return
	}
	mi, ok := l.byID[m.EventID]
	if !ok || l.probe[mi] {
		return // the probe's result is taken when the batch is done
	}
	l.mu.Lock()
	if l.seen[mi] {
		l.mu.Unlock()
		return
	}
	l.seen[mi] = true
	l.mu.Unlock()
	route := l.routes[mi]
	k := kindOf(err, context.Cause(l.pctx))
	r.breaker.observe(route, k)
	if k != attemptFault {
		return
	}
	l.settling.Lock()
	defer l.settling.Unlock()
	if open, _ := r.breaker.settle(l.ctx, route, truncate(sinkErrorText(err), 1000)); !open {
		return
	}
	l.mu.Lock()
	l.opened[route] = true
	all := len(l.opened) == len(l.sent)
	l.mu.Unlock()
	if all {
		l.cancel(errRouteOpened)
	}
}

// counted reports whether the result of message mi was counted already.
func (l *liveResults) counted(mi int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[mi]
}

// batchDone feeds the breakers with the batch's results once Publish has
// returned: the probe's, those the sink did not report as they came, and
// the batch as a whole (whether every attempt to a route failed); then it
// opens the routes whose faults call for it.
func (l *liveResults) batchDone(results []error) {
	r := l.b.relay
	cause := context.Cause(l.pctx)
	type tally struct {
		faults, attempts int
		lastErr          string
	}
	perRoute := map[string]*tally{}
	for mi, err := range results {
		route := l.routes[mi]
		k := kindOf(err, cause)
		if l.probe[mi] {
			errText := ""
			if err != nil {
				errText = truncate(err.Error(), 1000)
			}
			r.breaker.probeDone(l.ctx, route, k, errText)
			continue
		}
		if !l.counted(mi) {
			r.breaker.observe(route, k)
		}
		if k == attemptNone {
			continue
		}
		t := perRoute[route]
		if t == nil {
			t = &tally{}
			perRoute[route] = t
		}
		t.attempts++
		if k == attemptFault {
			t.faults++
			t.lastErr = truncate(err.Error(), 1000)
		}
	}
	for route, t := range perRoute {
		r.breaker.batchDone(route, t.faults, t.attempts)
	}
	for route, t := range perRoute {
		if t.faults > 0 {
			r.breaker.settle(l.ctx, route, t.lastErr)
		}
	}
}
