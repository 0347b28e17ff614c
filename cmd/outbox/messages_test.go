package main

import (
	"strings"
	"testing"
)

// TestEnqueueErrorSaysEnqueueOnce: a store error of `outbox enqueue` (here
// a table that was never migrated) reads "enqueue: ..." once, not
// "enqueue: enqueue: ...", on every backend.
func TestEnqueueErrorSaysEnqueueOnce(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			_, errOut, code := cli(t, eventLines(1, 1, ""), "enqueue", "--db", bc.dsn(t), "--table", newTable())
			if code == 0 || !strings.HasPrefix(errOut, "outbox: enqueue: ") || strings.Contains(errOut, "enqueue: enqueue:") ||
				!strings.Contains(errOut, "run `outbox migrate` first") || !strings.Contains(errOut, "nothing was enqueued") {
				t.Errorf("enqueue into a table never migrated: exit %d, stderr %q; want one \"enqueue: \" prefix, the fix and \"nothing was enqueued\"", code, errOut)
			}
		})
	}
}
