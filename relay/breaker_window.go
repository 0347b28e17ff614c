package relay

import (
	"fmt"
	"math"
	"time"
)

// failingForFaults is the least number of destination faults, with no
// success among them, that the silence rule (FailingFor) opens on: the
// number for a route whose earlier attempts in the window succeeded, or
// that had too few of them to tell (a lone event meeting an outage).
const failingForFaults = 3

// Tuning of the silence rule on a route that was already failing some
// requests before the faults in a row began: it opens only on a run of
// faults that random faults at the route's recent rate would produce
// less than once in noiseOdds runs, judged once the window holds at
// least noiseMinAttempts attempts from before the run (less FailingFor).
// A gateway that fails one request in five needs 6 faults in a row, one
// in ten needs 4; a healthy one 3. maxFailingForFaults bounds it: a route
// failing half its attempts or more also meets the rate rule.
const (
	noiseOdds           = 1e-4
	noiseMinAttempts    = 5
	maxFailingForFaults = 14
)

// failedBatchesFaults: a route opens when the batches in a row in which
// every attempt to it met a destination fault hold at least this many
// faults. A route meeting an outage opens at the first batch that sends
// it 6 events (the first batch after the outage began, or the one after
// it, holds successes from before), or at its second batch of 3, before
// an event's second retry; a gateway that fails one request in five at
// random fails 6 attempts with no success between them about once in
// 15,000 runs of attempts.
const failedBatchesFaults = 6

// faultWindow counts a route's attempts and faults per second over the
// window, and the faults since the last success.
type faultWindow struct {
	buckets []faultBucket
	// failing counts the destination faults since the last success (or
	// since a gap longer than the window), the first of which came at
	// failingSince and the latest at lastFault.
	failing                 int
	failingSince, lastFault time.Time
	// failedBatches counts the batches in a row in which every attempt
	// to the route met a destination fault, and batchFaults their faults.
	failedBatches, batchFaults int
}

type faultBucket struct {
	sec             int64
	attempts, fault int
}

func (w *faultWindow) add(now time.Time, window time.Duration, fault bool) {
	sec := now.Unix()
	w.prune(sec, window)
	if n := len(w.buckets); n == 0 || w.buckets[n-1].sec != sec {
		w.buckets = append(w.buckets, faultBucket{sec: sec})
	}
	last := &w.buckets[len(w.buckets)-1]
	last.attempts++
	if !fault {
		w.failing, w.failedBatches, w.batchFaults = 0, 0, 0
		return
	}
	last.fault++
	if w.failing == 0 || now.Sub(w.lastFault) > window {
		// A fault long after the last one starts a new count: a
		// sparse route's occasional faults are no outage.
		w.failing, w.failingSince = 0, now
	}
	w.failing++
	w.lastFault = now
}

func (w *faultWindow) prune(sec int64, window time.Duration) {
	oldest := sec - int64(window/time.Second)
	i := 0
	for i < len(w.buckets) && w.buckets[i].sec <= oldest {
		i++
	}
	w.buckets = w.buckets[i:]
}

func (w *faultWindow) reset() { *w = faultWindow{} }

// batchDone counts a batch that attempted the route: one whose every
// attempt met a destination fault (faults of them) continues the run of
// failed batches, any other ends it.
func (w *faultWindow) batchDone(faults, attempts int) {
	if attempts == 0 {
		return
	}
	if faults < attempts {
		w.failedBatches, w.batchFaults = 0, 0
		return
	}
	w.failedBatches++
	w.batchFaults += faults
}

// trips reports whether the faults call for opening, and why.
func (w *faultWindow) trips(now time.Time, cfg BreakerConfig) (bool, string) {
	w.prune(now.Unix(), cfg.Window)
	if w.batchFaults >= failedBatchesFaults {
		return true, fmt.Sprintf("every attempt of %d batches in a row met a destination fault (%d attempts, none succeeded)",
			w.failedBatches, w.batchFaults)
	}
	attempts, faults := 0, 0
	// The route's history: the window's attempts from before the run of
	// faults began, less FailingFor, so that the first moments of an
	// outage (a few faults, a last success) do not count as noise.
	historyEnd := w.failingSince.Add(-cfg.FailingFor).Unix()
	history, historyFaults := 0, 0
	for _, bk := range w.buckets {
		attempts += bk.attempts
		faults += bk.fault
		if bk.sec < historyEnd {
			history += bk.attempts
			historyFaults += bk.fault
		}
	}
	if w.failing >= faultsInARowNeeded(history, historyFaults) && now.Sub(w.failingSince) >= cfg.FailingFor {
		return true, fmt.Sprintf("no attempt succeeded for %s: %d attempts met a destination fault",
			now.Sub(w.failingSince).Round(time.Millisecond), w.failing)
	}
	if attempts >= cfg.MinAttempts && float64(faults) >= cfg.FailureRatio*float64(attempts) {
		return true, fmt.Sprintf("%d of %d attempts within %s met a destination fault", faults, attempts, cfg.Window)
	}
	return false, ""
}

// faultsInARowNeeded is the number of faults with no success between
// them that the silence rule opens on, given the route's history (the
// attempts and faults of the window before the run): failingForFaults,
// or more when that history already met faults often, so that a flaky
// route whose traffic is slow (a few attempts a second) does not open on
// the runs its noise strings together.
func faultsInARowNeeded(history, historyFaults int) int {
	if history < noiseMinAttempts || historyFaults <= 0 {
		return failingForFaults
	}
	rate := float64(historyFaults) / float64(history)
	if rate >= 0.5 {
		return maxFailingForFaults
	}
	// The least n with rate^n <= noiseOdds.
	n := int(math.Ceil(math.Log(noiseOdds) / math.Log(rate)))
	return min(max(n, failingForFaults), maxFailingForFaults)
}
