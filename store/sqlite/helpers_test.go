package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/sqlite"
)

// env is one test's database file: a migrated Store that owns its own
// *sql.DB (as `outbox relay` would) and an application *sql.DB on the same
// file opened with sqlite.DSN (as a producer would).
type env struct {
	path  string
	store *sqlite.Store
	app   *sql.DB
}

func newEnv(t testing.TB, cfg sqlite.Config) *env {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "outbox.db")
	s, err := sqlite.Open(ctx, "sqlite://"+path, cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.MigrateUp(ctx); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	app, err := sql.Open("sqlite", sqlite.DSN(path))
	if err != nil {
		t.Fatalf("open app db: %v", err)
	}
	t.Cleanup(func() { app.Close() })
	return &env{path: path, store: s, app: app}
}

// enqueue writes events in one committed application transaction.
func (e *env) enqueue(t testing.TB, events ...outbox.Event) []outbox.EventID {
	t.Helper()
	ctx := context.Background()
	tx, err := e.app.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	ids, err := e.store.Enqueue(ctx, tx, events...)
	if err != nil {
		tx.Rollback()
		t.Fatalf("enqueue: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return ids
}

func ev(aggregateID string, n int) outbox.Event {
	return outbox.Event{
		AggregateType: "payment",
		AggregateID:   aggregateID,
		EventType:     "ApprovalRequested",
		Payload:       json.RawMessage(fmt.Sprintf(`{"tx":%q,"n":%d}`, aggregateID, n)),
	}
}

func (e *env) claim(t testing.TB, limit int, lease time.Duration, failedBlocks bool) *store.Claim {
	t.Helper()
	c, err := e.store.Claim(context.Background(), store.ClaimRequest{RelayID: "test-relay", Limit: limit, Lease: lease, FailedBlocks: failedBlocks})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return c
}

// outcomes gives every event of c the same kind.
func outcomes(c *store.Claim, kind store.OutcomeKind) []store.Outcome {
	out := make([]store.Outcome, len(c.Events))
	for i, ev := range c.Events {
		out[i] = store.Outcome{ID: ev.ID, EventID: ev.EventID, Kind: kind, Attempt: ev.Attempt, Attempted: true,
			StartedAt: c.DBTime, FinishedAt: c.DBTime.Add(time.Millisecond)}
		if kind != store.Delivered {
			out[i].Error = "test " + strings.ToLower(string(kind))
		}
	}
	return out
}

func (e *env) complete(t testing.TB, c *store.Claim, failedBlocks bool, outs []store.Outcome) store.CompleteResult {
	t.Helper()
	res, err := e.store.Complete(context.Background(), store.CompleteRequest{Token: c.Token, RelayID: "test-relay",
		FailedBlocks: failedBlocks, Outcomes: outs})
	if err != nil {
		t.Fatalf("complete: %v", err)
	}
	return res
}

func (e *env) get(t testing.TB, id outbox.EventID) store.Record {
	t.Helper()
	r, err := e.store.GetEvent(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return r
}

func (e *env) attempts(t testing.TB, id outbox.EventID) []store.Attempt {
	t.Helper()
	a, err := e.store.Attempts(context.Background(), id)
	if err != nil {
		t.Fatalf("attempts %s: %v", id, err)
	}
	return a
}

func (e *env) stats(t testing.TB, failedBlocks bool) store.Stats {
	t.Helper()
	st, err := e.store.Stats(context.Background(), failedBlocks)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	return st
}

// dbNow reads SQLite's clock.
func (e *env) dbNow(t testing.TB) time.Time {
	t.Helper()
	var s string
	if err := e.app.QueryRow(`SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	tm, err := time.Parse("2006-01-02 15:04:05", s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// waitDBClockPast waits until SQLite's clock is strictly after tm.
func (e *env) waitDBClockPast(t testing.TB, tm time.Time) {
	t.Helper()
	wait.For(t, 5*time.Second, "the database clock to pass "+tm.String(), func() bool { return e.dbNow(t).After(tm) })
}

func eventIDs(c *store.Claim) []outbox.EventID {
	out := make([]outbox.EventID, len(c.Events))
	for i, e := range c.Events {
		out[i] = e.EventID
	}
	return out
}

func sameIDs(a, b []outbox.EventID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func storeFilter(aggregateID string, limit int) store.ListFilter {
	return store.ListFilter{AggregateType: "payment", AggregateID: aggregateID, Limit: limit}
}
