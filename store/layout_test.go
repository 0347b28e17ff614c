package store_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// backendSteps are the files every backend has, one per step of an
// event's life or of the store's upkeep, so that a step is found under the
// same name in each (CONTRIBUTING.md maps them). A step too large for one
// file goes on in <step>_<part>.go.
var backendSteps = []string{
	"doc.go",      // the package's guarantees and limits
	"store.go",    // Config, New, Open, Close, error wrapping
	"migrate.go",  // migrations, schema inspection, the up/down plans
	"adopt.go",    // adopting an existing table
	"enqueue.go",  // the producer: Enqueue, WriteEvents, context headers
	"lanes.go",    // the lanes' leases: balance, release, the relay's claims
	"claim.go",    // the claim: read, commit, refusals
	"complete.go", // recording outcomes: delivered, retry, FAILED, EXPIRED
	"sweep.go",    // the sweeper: expired leases, expiry, block/unblock
	"compensate.go",
	"routes.go",   // the circuit breaker's stored state
	"admin.go",    // the operator: stats, list, requeue, skip, purge
	"snapshot.go", // the metrics' snapshot
	"overdue.go",  // events past their due time, for alerts
	"queries.go",  // the backend's SQL, rendered with the table names
	"tx.go",       // how transactions run and are retried
}

// backendOwn are files of a mechanism only that backend has.
var backendOwn = map[string][]string{
	"postgres": {
		"analyze.go",  // ANALYZE after bulk changes
		"behind.go",   // the safety net behind the lane cursors
		"failover.go", // discarding sessions after read-only/shutdown errors
		"notify.go",   // LISTEN/NOTIFY wake-ups
	},
	"mysql": {
		"dsn.go",      // DSN forms and the READ COMMITTED connector
		"failover.go", // discarding connections after read-only/lost errors
		"time.go",     // DATETIME(6) values
	},
	"sqlite": {
		"dsn.go",  // file paths and DSN forms
		"time.go", // the stored text timestamps
	},
}

// TestBackendsShareOneFilePlan keeps store/postgres, store/mysql and
// store/sqlite on one file plan: each has every step file, and any other
// file is a step's part (<step>_<part>.go) or a mechanism of its own
// listed in backendOwn.
func TestBackendsShareOneFilePlan(t *testing.T) {
	for backend, own := range backendOwn {
		files, err := filepath.Glob(filepath.Join(backend, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, f := range files {
			if name := filepath.Base(f); !strings.HasSuffix(name, "_test.go") {
				have[name] = true
			}
		}
		if len(have) == 0 {
			t.Fatalf("no Go files in store/%s", backend)
		}
		for _, step := range backendSteps {
			if !have[step] {
				t.Errorf("store/%s has no %s: every backend has the step files %v", backend, step, backendSteps)
			}
		}
		for name := range have {
			if slices.Contains(backendSteps, name) || slices.Contains(own, name) {
				continue
			}
			step, _, ok := strings.Cut(name, "_")
			if ok && slices.Contains(backendSteps, step+".go") {
				continue // a part of a step
			}
			t.Errorf("store/%s/%s is neither a step file (%v), a step's part (<step>_<part>.go), nor listed as the backend's own in backendOwn",
				backend, name, backendSteps)
		}
	}
}
