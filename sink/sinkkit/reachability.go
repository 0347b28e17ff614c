package sinkkit

import (
	"log/slog"
	"sync"
	"time"
)

// Reachability keeps the [sink.Health] state of one destination: sinks call Up
// when they reach it and Down when an attempt fails. It is safe for
// concurrent use; create it with [NewReachability].
type Reachability struct {
	mu      sync.Mutex
	ok      bool
	ever    bool
	lastErr error
	since   time.Time

	// Set by Logging: Failed and Reached log.
	log      *slog.Logger
	sinkName string
	attrs    []any
	failures int // failed attempts since the last success
}

// Logging makes Failed and Reached log, as sinkName ("nats sink") with
// attrs (e.g. "server", "127.0.0.1:4222"), and returns r.
func (r *Reachability) Logging(log *slog.Logger, sinkName string, attrs ...any) *Reachability {
	r.log, r.sinkName, r.attrs = log, sinkName, attrs
	return r
}

// Failed records a failed attempt to reach the destination (as Down) and
// logs it at WARN, the first time after a success and every 20th time,
// with the count: "the destination is unreachable; retrying".
func (r *Reachability) Failed(err error) {
	r.Down(err)
	r.mu.Lock()
	r.failures++
	n := r.failures
	r.mu.Unlock()
	if r.log != nil && (n == 1 || n%20 == 0) {
		r.log.Warn(r.sinkName+": the destination is unreachable; retrying in the background",
			append(append([]any{}, r.attrs...), "attempts", n, "err", err)...)
	}
}

// Reached records that the destination answered (as Up) and logs at INFO
// when that follows failed attempts.
func (r *Reachability) Reached() {
	changed, _ := r.Up()
	r.mu.Lock()
	n := r.failures
	r.failures = 0
	r.mu.Unlock()
	if r.log != nil && changed && n > 0 {
		r.log.Info(r.sinkName+": connected", append(append([]any{}, r.attrs...), "failed_attempts", n)...)
	}
}

// Pause waits d, or until stop is closed: then it returns false.
func Pause(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

// NewReachability returns the state of a destination not yet tried.
func NewReachability() *Reachability { return &Reachability{since: time.Now()} }

// Up records that the destination answered. It reports whether this
// changed the state (it was not reachable), and whether it was the first
// time ever.
func (r *Reachability) Up() (changed, first bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ok {
		return false, false
	}
	first = !r.ever
	r.ok, r.ever, r.lastErr, r.since = true, true, nil, time.Now()
	return true, first
}

// Down records that an attempt to reach the destination failed with err.
// It reports whether this changed the state (it was reachable, or had
// not been tried yet).
func (r *Reachability) Down(err error) (changed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed = r.ok || r.lastErr == nil
	if changed {
		r.since = time.Now()
	}
	r.ok, r.lastErr = false, err
	return changed
}

// DownIfUntried records err as Down does, but only while the destination
// has never been tried: no attempt has failed or succeeded yet. It keeps a
// more precise error that a concurrent attempt recorded first.
func (r *Reachability) DownIfUntried(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ok || r.lastErr != nil {
		return
	}
	r.since, r.lastErr = time.Now(), err
}

// Reachable implements [sink.Health].
func (r *Reachability) Reachable() (ok bool, lastErr error, since time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ok, r.lastErr, r.since
}

// Ever reports whether the destination was ever reached.
func (r *Reachability) Ever() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ever
}
