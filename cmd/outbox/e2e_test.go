package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/txoutbox/outbox/internal/testenv"
)

// gateway is a test HTTP receiver: it records every request's event id
// and per-aggregate sequence, and can fail or stall requests.
type gateway struct {
	mu       sync.Mutex
	received []receipt
	statuses map[int]int
	// respond decides the status of request number n (from 1); nil = 200.
	respond func(n int) int
	// stall, if set, is called before responding to request n; it may block.
	stall func(n int)
	n     int
}

type receipt struct {
	eventID string
	agg     int
	seq     int
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	g.mu.Lock()
	g.n++
	n := g.n
	g.mu.Unlock()
	if g.stall != nil {
		g.stall(n)
	}
	status := http.StatusOK
	if g.respond != nil {
		status = g.respond(n)
	}
	g.mu.Lock()
	if g.statuses == nil {
		g.statuses = map[int]int{}
	}
	g.statuses[status]++
	if status/100 == 2 {
		var p struct{ Agg, Seq int }
		_ = json.Unmarshal(body, &p)
		g.received = append(g.received, receipt{r.Header.Get("Idempotency-Key"), p.Agg, p.Seq})
	}
	g.mu.Unlock()
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "0")
	}
	w.WriteHeader(status)
}

func (g *gateway) snapshot() ([]receipt, map[int]int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := map[int]int{}
	for k, v := range g.statuses {
		st[k] = v
	}
	return append([]receipt(nil), g.received...), st
}

// checkDelivered asserts every event arrived, in order per aggregate once
// repeats are dropped, and returns the number of repeats.
func checkDelivered(t *testing.T, rs []receipt, total, aggs int) int {
	t.Helper()
	seen := map[string]bool{}
	next := make([]int, aggs)
	dups := 0
	for _, r := range rs {
		if seen[r.eventID] {
			dups++
			continue
		}
		seen[r.eventID] = true
		if r.seq != next[r.agg] {
			t.Fatalf("aggregate tx-%d: got seq %d, want %d (order broken)", r.agg, r.seq, next[r.agg])
		}
		next[r.agg]++
	}
	if len(seen) != total {
		t.Fatalf("gateway saw %d distinct events, want %d (lost %d)", len(seen), total, total-len(seen))
	}
	return dups
}

// TestDrainFlakyHTTP: `outbox relay --drain` delivers a backlog through the
// HTTP sink to a gateway that fails a third of the requests, with retries.
func TestDrainFlakyHTTP(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			const total, aggs = 300, 10
			mustCLI(t, "", "migrate", "--db", dsn, "--table", table)
			mustCLI(t, eventLines(total, aggs, ""), "enqueue", "--db", dsn, "--table", table)
			var mu sync.Mutex
			rnd := rand.New(rand.NewPCG(7, 7))
			gw := &gateway{respond: func(int) int {
				mu.Lock()
				defer mu.Unlock()
				switch x := rnd.Float64(); {
				case x < 0.2:
					return http.StatusServiceUnavailable
				case x < 0.3:
					return http.StatusTooManyRequests
				}
				return http.StatusOK
			}}
			srv := httptest.NewServer(gw)
			defer srv.Close()
			mustCLI(t, "", "relay", "--db", dsn, "--table", table, "--sink", srv.URL+"/approve", "--drain",
				"--batch", "50", "--poll-interval", "10ms", "--backoff-min", "5ms", "--backoff-max", "20ms", "--max-retries", "50")
			rs, statuses := gw.snapshot()
			if dups := checkDelivered(t, rs, total, aggs); dups != 0 {
				t.Errorf("%d duplicates with no crash", dups)
			}
			if statuses[503] == 0 || statuses[429] == 0 {
				t.Fatalf("the gateway answered %v; want some 503 and 429 to be retried", statuses)
			}
			if st := statusJSON(t, dsn, table); count(st, "PROCESSED") != total {
				t.Fatalf("after drain: %v", st)
			}
		})
	}
}

// TestSIGKILLMidBatch kills a real relay process while a batch is in flight
// (some events acknowledged by the gateway but not yet marked), several
// times, and checks: nothing lost, duplicates bounded by the batch in
// flight, order kept, and no row left PROCESSING once the lease has ended
// and a relay has swept.
func TestSIGKILLMidBatch(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			const total, aggs, batch, inFlight, kills = 400, 20, 20, 2, 3
			mustCLI(t, "", "migrate", "--db", dsn, "--table", table)
			mustCLI(t, eventLines(total, aggs, ""), "enqueue", "--db", dsn, "--table", table)

			killAt := map[int]bool{60: true, 170: true, 280: true}
			stalled := make(chan int)
			release := make(chan struct{})
			gw := &gateway{stall: func(n int) {
				if killAt[n] {
					stalled <- n
					<-release
				}
			}}
			srv := httptest.NewServer(gw)
			defer srv.Close()
			defer close(release)

			relayArgs := []string{"relay", "--db", dsn, "--table", table, "--sink", srv.URL + "/approve",
				"--batch", fmt.Sprint(batch), "--in-flight", fmt.Sprint(inFlight), "--poll-interval", "50ms", "--lease", "10s", "--sweep-interval", "500ms",
				"--backoff-min", "5ms", "--backoff-max", "20ms", "--progress", "0"}
			// A 10 s lease: a claim must record with half its lease left.
			// On a busy machine a lease of a few seconds can leave
			// SQLite's relay claiming nothing for minutes, every claim
			// timing out.
			for k := 0; k < kills; k++ {
				cmd, stderr := startRelay(t, relayArgs...)
				select {
				case <-stalled:
				case <-time.After(2 * time.Minute):
					t.Fatalf("kill %d: the relay never reached the kill point; stderr:\n%s", k+1, stderr.String())
				}
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				_ = cmd.Wait()
			}
			// Rows of the last killed relay stay PROCESSING until their
			// lease ends; a new relay's sweeper returns them.
			if st := statusJSON(t, dsn, table); count(st, "PROCESSING") == 0 {
				t.Fatalf("after SIGKILL mid-batch, no row is PROCESSING: the kill did not land mid-batch (%v)", st)
			}
			cmd, stderr := startRelay(t, append(relayArgs, "--drain")...)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("final drain: %v\n%s", err, stderr.String())
				}
			case <-time.After(3 * time.Minute):
				_ = cmd.Process.Kill()
				t.Fatalf("final drain did not finish:\n%s", stderr.String())
			}
			st := statusJSON(t, dsn, table)
			if count(st, "PROCESSING") != 0 || count(st, "PROCESSED") != total {
				t.Fatalf("after the final drain: %v", st)
			}
			rs, _ := gw.snapshot()
			dups := checkDelivered(t, rs, total, aggs)
			// What a kill can repeat is what the relay had in flight: at
			// most inFlight batches claimed and not yet recorded.
			if bound := kills * batch * inFlight; dups > bound {
				t.Fatalf("%d duplicates after %d kills with %d batches of %d in flight: more than the work in flight", dups, kills, inFlight, batch)
			}
			t.Logf("%d kills: 0 lost, %d duplicates (bound %d)", kills, dups, kills*batch*inFlight)
		})
	}
}

// startRelay runs the test binary as `outbox <args>`. Its stderr may be
// read while the relay runs.
func startRelay(t *testing.T, args ...string) (*exec.Cmd, *testenv.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "OUTBOX_TEST_EXEC_MAIN=1")
	stderr := &testenv.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
		}
	})
	return cmd, stderr
}

var _ = testenv.InCI
