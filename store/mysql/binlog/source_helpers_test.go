package binlog_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/e2etest"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/store/mysql"
)

// sourceHarness is a private MariaDB with the binary log on, an outbox
// table of the test's own, migrated by the CLI, and a store on it.
type sourceHarness struct {
	srv   *testenv.MariaDBServer
	table string
	st    *mysql.Store
	db    *sql.DB
}

func newSourceHarness(t *testing.T, table string, serverArgs ...string) *sourceHarness {
	t.Helper()
	if len(serverArgs) == 0 {
		serverArgs = binlogServerArgs
	}
	srv := testenv.StartMariaDB(t, serverArgs...)
	e2etest.RunCLI(t, "", "migrate", "--db", srv.DSN(), "--table", table)
	st, err := mysql.Open(testContext(t, time.Minute), srv.DSN(), mysql.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &sourceHarness{srv: srv, table: table, st: st, db: st.DB()}
}

// enqueue commits one transaction of n events spread over aggs
// aggregates; each payload names its aggregate and its number in it.
func (h *sourceHarness) enqueue(t *testing.T, ctx context.Context, first, n, aggs int) {
	t.Helper()
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	evs := make([]outbox.Event, n)
	for i := range evs {
		k := first + i
		agg := fmt.Sprintf("agg-%d", k%aggs)
		evs[i] = outbox.Event{AggregateType: "payment", AggregateID: agg, EventType: "Seq",
			Payload: json.RawMessage(fmt.Sprintf(`{"agg":%q,"n":%d}`, agg, k/aggs))}
	}
	for len(evs) > 0 {
		chunk := evs[:min(len(evs), 250)]
		if _, err := h.st.Enqueue(ctx, tx, chunk...); err != nil {
			t.Fatal(err)
		}
		evs = evs[len(chunk):]
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func (h *sourceHarness) count(t *testing.T, status outbox.Status) int {
	t.Helper()
	var n int
	if err := h.db.QueryRowContext(testContext(t, time.Minute), "SELECT COUNT(*) FROM `"+h.table+"` WHERE status = ?", string(status)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// binlogDumpThreads counts the server's replication threads that send a
// replica the binary log (SHOW PROCESSLIST's Command "Binlog Dump").
func (h *sourceHarness) binlogDumpThreads(t *testing.T) int {
	t.Helper()
	var n int
	err := h.db.QueryRowContext(testContext(t, time.Minute),
		"SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'").Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// holder returns the relay holding the stream lease, or "".
func (h *sourceHarness) holder(t *testing.T) string {
	var who string
	err := h.db.QueryRowContext(testContext(t, time.Minute), "SELECT holder FROM `"+h.table+"_cdc_lease` WHERE expires_at > UTC_TIMESTAMP(6)").Scan(&who)
	if err != nil {
		return ""
	}
	return who
}

// receiver is an HTTP endpoint that records each delivery: per event id
// how often, and per aggregate the order of first deliveries.
type receiver struct {
	mu         sync.Mutex
	byID       map[string]int
	total      int
	last       map[string]int // per aggregate, the highest number first delivered
	violations int
}

func newReceiver() *receiver { return &receiver{byID: map[string]int{}, last: map[string]int{}} }

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var p struct {
		Agg string `json:"agg"`
		N   int    `json:"n"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := req.Header.Get("Outbox-Event-Id")
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byID[id]++
	r.total++
	if r.byID[id] == 1 {
		if last, seen := r.last[p.Agg]; seen && p.N < last {
			r.violations++
		}
		r.last[p.Agg] = max(r.last[p.Agg], p.N)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) counts() (distinct, total, violations int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID), r.total, r.violations
}

// eventually waits for cond, checking every 20ms, and fails the test
// with what it waited for (and state's words) when d passes first.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool, state ...func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			extra := ""
			for _, s := range state {
				extra += ": " + s()
			}
			t.Fatalf("timed out after %s waiting for %s%s", d, what, extra)
		case <-tick.C:
		}
	}
}

// freeAddr returns a local address nothing listens on, for --admin.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// metric reads the value of the sample of /metrics on admin that the
// regular expression line matches (its first group), or -1.
func metric(admin string, line *regexp.Regexp) float64 {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := line.FindSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		return -1
	}
	return v
}
