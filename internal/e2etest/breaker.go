package e2etest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/outbox/store"
)

// BrokerOutage is the length of the broker outages of the breaker tests:
// 2 minutes, 15 seconds with -short.
func BrokerOutage(short bool) time.Duration {
	if short {
		return 15 * time.Second
	}
	return 2 * time.Minute
}

// BreakerMoves returns the transitions of the backlog's route breakers as
// `outbox routes list --json` prints them, oldest first ("OPEN",
// "HALF_OPEN", "CLOSED", ...).
func (b *Backlog) BreakerMoves(t testing.TB) []string {
	t.Helper()
	var got struct {
		Log []struct{ To string }
	}
	out := RunCLI(t, "", "routes", "list", "--json", "--log", "10000", "--db", b.DSN, "--table", b.Table)
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("routes list --json printed %q: %v", out, err)
	}
	moves := make([]string, len(got.Log))
	for i, e := range got.Log {
		moves[len(got.Log)-1-i] = e.To
	}
	return moves
}

// BreakerOpened reports whether some route's breaker opened.
func (b *Backlog) BreakerOpened(t testing.TB) bool {
	for _, m := range b.BreakerMoves(t) {
		if m == string(store.BreakerOpen) {
			return true
		}
	}
	return false
}

// OutageFigures reads what an outage did to the backlog: the events by
// final state and the highest retry count.
func (b *Backlog) OutageFigures(t testing.TB) (byStatus map[string]int, maxRetries int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tbl := pgx.Identifier{b.Table}.Sanitize()
	rows, err := conn.Query(ctx, "SELECT status, count(*), max(retry_count) FROM "+tbl+" GROUP BY status")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	byStatus = map[string]int{}
	for rows.Next() {
		var st string
		var n, m int
		if err := rows.Scan(&st, &n, &m); err != nil {
			t.Fatal(err)
		}
		byStatus[st], maxRetries = n, max(maxRetries, m)
	}
	return byStatus, maxRetries
}

// CheckOutage asserts what a broker outage behind the breaker must leave:
// every event PROCESSED (none FAILED, BLOCKED or lost), no retry counted
// beyond the one the opening may cost, the breaker opened and closed again,
// and the drain done within 3 minutes of the broker's return. It logs the
// figures. The bound catches a breaker that stays open or a relay that
// stopped, not a slow drain: a probe comes within 30 s at the defaults and
// the rest of the backlog takes seconds, or over a minute on a busy
// machine.
func (b *Backlog) CheckOutage(t testing.TB, n int, outage, drain time.Duration) {
	t.Helper()
	byStatus, maxRetries := b.OutageFigures(t)
	moves := b.BreakerMoves(t)
	t.Logf("%s outage: %d events: %v; max retry_count %d; breaker moves %v; drained %s after the broker returned",
		outage, n, byStatus, maxRetries, moves, drain.Round(time.Millisecond))
	if byStatus["PROCESSED"] != n {
		t.Errorf("%d of %d events PROCESSED (%v)", byStatus["PROCESSED"], n, byStatus)
	}
	if maxRetries > 1 {
		t.Errorf("retry_count reached %d: the breaker should stop the count after at most one", maxRetries)
	}
	if len(moves) == 0 || moves[0] != string(store.BreakerOpen) || moves[len(moves)-1] != string(store.BreakerClosed) {
		t.Errorf("breaker moves %v: want it opened and closed again", moves)
	}
	if drain > 3*time.Minute {
		t.Errorf("drained %s after the broker returned, want within 3 minutes", drain)
	}
}

// WaitOutage waits d (the outage) unless ctx ends first.
func WaitOutage(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("outage cut short: %w", ctx.Err())
	case <-timer.C:
		return nil
	}
}
