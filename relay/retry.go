package relay

import (
	"fmt"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// retryOrFail decides the outcome of an attempt that met a retryable
// fault while the route's breaker is closed: a retry after the backoff
// (or the destination's Retry-After, up to a day), or, once MaxRetries
// retries are spent (or with NoRetries), FAILED with a dead letter, its
// aggregate's later events held behind it (BLOCKED when the failure
// policy blocks). st stops the aggregate either way, so that order holds.
func (r *Relay) retryOrFail(ev *store.Claimed, o *store.Outcome, err error, st *aggregateState) {
	failures := ev.RetryCount + 1
	if r.cfg.NoRetries || failures > r.cfg.MaxRetries {
		o.Kind, o.Attempted = store.Failed, true
		o.Error = fmt.Sprintf("retries exhausted after %d attempts: %s", failures, o.Error)
		st.stopped, st.block = true, r.failedBlocks()
		return
	}
	delay := r.backoff.Delay(failures)
	if ra := outbox.RetryAfter(err); ra > 0 {
		delay = min(ra, 24*time.Hour)
	}
	o.Kind, o.Attempted, o.RetryIn = store.Retry, true, delay
	st.stopped, st.retryIn = true, delay
}
