package cdctrack

import (
	"context"
	"time"
)

// KeepLease renews a stream lease of the given length every third of it,
// with acquire (which takes or renews the lease and reports whether this
// relay holds it), until ctx ends. It calls lost, once, and returns when
// a renewal finds another holder, or when renewals have failed for the
// whole length of the lease (the lease may have ended and another relay
// may have taken it).
func KeepLease(ctx context.Context, length time.Duration, acquire func(context.Context) (bool, error), lost func()) {
	t := time.NewTicker(length / 3)
	defer t.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, length/3)
		held, err := acquire(cctx)
		cancel()
		if err == nil && held {
			lastOK = time.Now()
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if (err == nil && !held) || time.Since(lastOK) >= length {
			lost()
			return
		}
	}
}
