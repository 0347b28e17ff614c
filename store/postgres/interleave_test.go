package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/storetest"
)

// Deterministic interleavings of the reaper, Complete, a lane's takeover,
// Enqueue and Claim. Each statement of the store is one SQL statement, so a
// step is held at a chosen point by a second connection that holds a lock
// the statement needs (an uncommitted audit row with the same key, an
// advisory lock a trigger waits for, or an uncommitted event of the same
// aggregate), and a step is known to wait by asking pg_stat_activity,
// never by sleeping.

// interleaving is one table with stores whose connections carry their own
// application_name, so that a test can see which of them waits on a lock.
type interleaving struct {
	t     *testing.T
	table string
	pool  *pgxpool.Pool // plain connections: blockers and checks
	main  *postgres.Store
}

func newInterleaving(t *testing.T) *interleaving {
	t.Helper()
	pool := newPool(t)
	table := storetest.TableName("pgi")
	s := migratedStore(t, pool, postgres.Config{Table: table, NoNotify: true})
	return &interleaving{t: t, table: table, pool: pool, main: s}
}

// storeAs returns a store on the same table whose connections are named
// app in pg_stat_activity.
func (il *interleaving) storeAs(role string) (*postgres.Store, string) {
	il.t.Helper()
	app := il.table + "_" + role
	cfg, err := pgxpool.ParseConfig(testenv.Postgres.Addr(il.t))
	if err != nil {
		il.t.Fatal(err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		il.t.Fatal(err)
	}
	il.t.Cleanup(pool.Close)
	s, err := postgres.New(pool, postgres.Config{Table: il.table, NoNotify: true})
	if err != nil {
		il.t.Fatal(err)
	}
	return s, app
}

// waitsOnLock waits until a connection named app waits on a lock.
func (il *interleaving) waitsOnLock(app, what string) {
	il.t.Helper()
	wait.Until(il.t, 30*time.Second, what, func() (bool, error) {
		var n int
		err := il.pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n)
		return n > 0, err
	})
}

// claimOne enqueues one event and claims it as relay "paused" under lease.
func (il *interleaving) claimOne(agg string, lease time.Duration) *store.Claim {
	il.t.Helper()
	ctx := context.Background()
	tx, err := il.pool.Begin(ctx)
	if err != nil {
		il.t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := il.main.Enqueue(ctx, tx, payment(agg, 1)); err != nil {
		il.t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		il.t.Fatal(err)
	}
	// A claim that outlasts half a short lease on a loaded machine takes
	// nothing (its lanes must have that much left when it records): claim
	// until it takes the event.
	var c *store.Claim
	wait.Until(il.t, 30*time.Second, fmt.Sprintf("a claim under a %s lease to take the event", lease), func() (bool, error) {
		c, err = il.main.Claim(ctx, store.ClaimRequest{RelayID: "paused", Limit: 10, Lease: lease, FailedBlocks: true})
		return err == nil && len(c.Events) == 1, err
	})
	return c
}

// waitLeaseEnded waits until the lease of the lane of row id has ended on
// the database's clock.
func (il *interleaving) waitLeaseEnded(id int64) {
	il.t.Helper()
	wait.Until(il.t, 30*time.Second, "the lane's lease to end on the database's clock", func() (bool, error) {
		var ended bool
		err := il.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT l.lease_until_ms < (extract(epoch FROM now()) * 1000)::bigint
			FROM %q l JOIN %q o ON o.lane = l.lane WHERE o.id = $1`, il.table+"_lanes", il.table), id).Scan(&ended)
		return ended, err
	})
}

// claimExpired is claimOne under a short lease, once that lease has ended.
func (il *interleaving) claimExpired(agg string) *store.Claim {
	il.t.Helper()
	c := il.claimOne(agg, time.Second) // short, but long enough for a claim on a busy machine to take the event
	il.waitLeaseEnded(c.Events[0].ID)
	return c
}

// holdAuditKey inserts, in a transaction it leaves open, the audit row that
// a statement of the store will insert for (event, token, outcome): that
// statement then waits, after its writes to the outbox row, until release.
func (il *interleaving) holdAuditKey(ev store.Claimed, token string, outcome store.OutcomeKind) (release func()) {
	il.t.Helper()
	ctx := context.Background()
	tx, err := il.pool.Begin(ctx)
	if err != nil {
		il.t.Fatal(err)
	}
	_, err = tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %q (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at)
		VALUES ($1, $2, $3, $4, 1, 'blocker', now(), now())`, il.table+"_attempts"),
		ev.EventID.String(), token, string(outcome), ev.ID)
	if err != nil {
		tx.Rollback(ctx)
		il.t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			if err := tx.Rollback(ctx); err != nil {
				il.t.Errorf("release the blocker: %v", err)
			}
		}
	}
	il.t.Cleanup(release)
	return release
}

// holdAfterRowWrite pauses the statements of app, after each write of a
// PROCESSED row version and before their commit, until release: a trigger
// on the test's table waits for an advisory lock that a transaction left
// open holds. A delivery writes no audit row that holdAuditKey could hold.
func (il *interleaving) holdAfterRowWrite(app string) (release func()) {
	il.t.Helper()
	ctx := context.Background()
	fn := il.table + "_pause"
	if _, err := il.pool.Exec(ctx, fmt.Sprintf(`CREATE FUNCTION %[1]q() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('application_name') = %[2]s AND NEW.status = 'PROCESSED' THEN
        PERFORM pg_advisory_xact_lock(hashtext(%[2]s));
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER %[1]q AFTER UPDATE ON %[3]q FOR EACH ROW EXECUTE FUNCTION %[1]q()`,
		fn, "'"+app+"'", il.table)); err != nil {
		il.t.Fatal(err)
	}
	il.t.Cleanup(func() {
		if _, err := il.pool.Exec(context.Background(), fmt.Sprintf(`DROP FUNCTION IF EXISTS %q() CASCADE`, fn)); err != nil {
			il.t.Errorf("drop the pause trigger: %v", err)
		}
	})
	tx, err := il.pool.Begin(ctx)
	if err != nil {
		il.t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, app); err != nil {
		tx.Rollback(ctx)
		il.t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			if err := tx.Rollback(ctx); err != nil {
				il.t.Errorf("release the pause: %v", err)
			}
		}
	}
	il.t.Cleanup(release)
	return release
}

func (il *interleaving) outcomesOf(id outbox.EventID) []store.OutcomeKind {
	il.t.Helper()
	atts, err := il.main.Attempts(context.Background(), id)
	if err != nil {
		il.t.Fatal(err)
	}
	var out []store.OutcomeKind
	for _, a := range atts {
		out = append(out, a.Outcome)
	}
	return out
}

func delivered(c *store.Claim) store.CompleteRequest {
	var outs []store.Outcome
	for _, ev := range c.Events {
		outs = append(outs, store.Outcome{ID: ev.ID, EventID: ev.EventID, Kind: store.Delivered, Attempted: true,
			Attempt: ev.Attempt, StartedAt: c.DBTime, FinishedAt: c.DBTime})
	}
	return store.CompleteRequest{Token: c.Token, RelayID: "paused", FailedBlocks: true, Outcomes: outs}
}

// The reaper has found the claim whose lane's lease ended and deleted it,
// but not committed yet (it waits on its audit row), when the paused
// relay's Complete arrives: Complete does not wait, finds the lane no
// longer held under the claim's lease and is fenced; the late attempt is
// audited. The reaper then ends the claim: the row is PENDING for the
// next claim, with its LEASE_EXPIRED audit row.
func TestInterleavingCompleteWhileReaperHoldsTheClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	il := newInterleaving(t)
	reaper, reaperApp := il.storeAs("reaper")
	completer, _ := il.storeAs("completer")
	c := il.claimExpired("reaped")
	ev := c.Events[0]

	release := il.holdAuditKey(ev, c.Token, "LEASE_EXPIRED")
	swept := make(chan store.SweepResult, 1)
	go func() {
		res, err := reaper.Sweep(ctx, store.SweepRequest{RelayID: "reaper", FailedBlocks: true})
		if err != nil {
			t.Errorf("sweep: %v", err)
		}
		swept <- res
	}()
	il.waitsOnLock(reaperApp, "the reaper to have taken the claim and wait on its audit row")

	completeCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	res, err := completer.Complete(completeCtx, delivered(c))
	if err != nil {
		t.Fatalf("Complete waited on the claim the reaper holds (or failed): %v", err)
	}
	if len(res.Applied) != 0 || len(res.Fenced) != 1 {
		t.Fatalf("Complete after the lane's lease ended = %+v, want fenced", res)
	}
	release()
	if res := <-swept; res.Reaped != 1 {
		t.Fatalf("the reaper ended %d claimed events, want 1", res.Reaped)
	}
	r, err := il.main.GetEvent(ctx, ev.EventID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != outbox.StatusPending || r.RetryCount != 0 {
		t.Fatalf("the row is %s/%d, want PENDING/0 for the next claim", r.Status, r.RetryCount)
	}
	if got := fmt.Sprint(il.outcomesOf(ev.EventID)); got != "[LEASE_EXPIRED DELIVERED]" && got != "[DELIVERED LEASE_EXPIRED]" {
		t.Fatalf("audit trail %s, want the lease expiry and the late delivery", got)
	}
	again, err := il.main.Claim(ctx, store.ClaimRequest{RelayID: "next", Limit: 10, Lease: time.Minute, FailedBlocks: true})
	if err != nil || len(again.Events) != 1 || again.Events[0].EventID != ev.EventID {
		t.Fatalf("the next claim got %v (%v), want the reaped event again", again, err)
	}
}

// The paused relay's Complete has marked the row PROCESSED but not
// committed yet when the lane's lease ends and the reaper runs: the reaper
// skips the claim Complete holds without waiting, and after the commit
// there is no claim left to reap.
func TestInterleavingReaperWhileCompleteHoldsTheClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	il := newInterleaving(t)
	reaper, _ := il.storeAs("reaper")
	completer, completerApp := il.storeAs("completer")
	c := il.claimOne("completed", 2*time.Second)
	ev := c.Events[0]

	release := il.holdAfterRowWrite(completerApp)
	completed := goComplete(t, completer, delivered(c))
	il.waitsOnLock(completerApp, "Complete to have written the row and wait before its commit")
	il.waitLeaseEnded(ev.ID)

	sweepCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	res, err := reaper.Sweep(sweepCtx, store.SweepRequest{RelayID: "reaper", FailedBlocks: true})
	if err != nil {
		t.Fatalf("the reaper waited on the claim Complete holds (or failed): %v", err)
	}
	if res.Reaped != 0 {
		t.Fatalf("the reaper ended %d claimed events while Complete held the claim, want 0", res.Reaped)
	}
	release()
	if res := <-completed; len(res.Applied) != 1 {
		t.Fatalf("Complete = %+v, want applied: it held the lane when its lease was still on", res)
	}
	if res, err := reaper.Sweep(ctx, store.SweepRequest{RelayID: "reaper", FailedBlocks: true}); err != nil || res.Reaped != 0 {
		t.Fatalf("sweep after the commit: %+v, %v; want nothing reaped", res, err)
	}
	r, err := il.main.GetEvent(ctx, ev.EventID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != outbox.StatusProcessed {
		t.Fatalf("the row is %s, want PROCESSED", r.Status)
	}
	if got := fmt.Sprint(il.outcomesOf(ev.EventID)); got != "[DELIVERED]" {
		t.Fatalf("audit trail %s, want only the delivery", got)
	}
}

// The paused relay's Complete holds its lane (a share lock, taken while
// the lease was on) when the lease ends and another relay balances: it
// does not take the lane while the Complete is open, and once the
// delivery is committed it takes the lane and finds nothing to send: the
// event is delivered once.
func TestInterleavingTakeoverWhileCompleteHoldsTheLane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	il := newInterleaving(t)
	taker, _ := il.storeAs("taker")
	completer, completerApp := il.storeAs("completer")
	c := il.claimOne("taken", 2*time.Second)
	ev := c.Events[0]

	release := il.holdAfterRowWrite(completerApp)
	completed := goComplete(t, completer, delivered(c))
	il.waitsOnLock(completerApp, "Complete to have written the row and wait before its commit")
	il.waitLeaseEnded(ev.ID)

	var lane int
	if err := il.pool.QueryRow(ctx, fmt.Sprintf(`SELECT lane FROM %q WHERE id = $1`, il.table), ev.ID).Scan(&lane); err != nil {
		t.Fatal(err)
	}
	req := store.ClaimRequest{RelayID: "taker", Limit: 10, Lease: time.Minute, FailedBlocks: true}
	claimCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got, err := taker.Claim(claimCtx, req)
	if err != nil {
		t.Fatalf("the other relay's claim waited on the lane Complete holds (or failed): %v", err)
	}
	if len(got.Events) != 0 {
		t.Fatalf("the other relay claimed %v while the paused relay's Complete held the lane", got.Events)
	}
	if _, ok := taker.HeldLanes("taker")[lane]; ok {
		t.Fatal("the other relay took the lane while a Complete held it")
	}
	release()
	if res := <-completed; len(res.Applied) != 1 {
		t.Fatalf("Complete = %+v, want applied", res)
	}
	wait.Until(t, 10*time.Second, "the other relay to take the lane", func() (bool, error) {
		got, err := taker.Claim(ctx, req)
		if err == nil && len(got.Events) != 0 {
			t.Fatalf("the other relay claimed %v, which the paused relay delivered", got.Events)
		}
		_, ok := taker.HeldLanes("taker")[lane]
		return ok, err
	})
	if got := fmt.Sprint(il.outcomesOf(ev.EventID)); got != "[DELIVERED]" {
		t.Fatalf("audit trail %s, want one delivery", got)
	}
}

// Two producers enqueue events of one aggregate; the first has not
// committed when the second enqueues. Whatever the mechanism, a claim made
// then must not take the second producer's event (it would go out before
// the first's, which has the lower id), and once both committed the
// aggregate is claimed in commit order. The second producer is stopped
// before its insert, waiting on a lock; a claim runs at that point and
// must not wait on it. Another aggregate is never held up.
func TestInterleavingClaimWhileProducersOfOneAggregateEnqueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	il := newInterleaving(t)
	t1, err := il.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer t1.Rollback(ctx)
	first, err := il.main.Enqueue(ctx, t1, payment("pay-1", 1))
	if err != nil {
		t.Fatal(err)
	}
	t2, err := il.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer t2.Rollback(ctx)
	var pid2 int32
	if err := t2.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid2); err != nil {
		t.Fatal(err)
	}
	if _, err := il.main.Enqueue(ctx, t2, payment("pay-2", 1)); err != nil { // another aggregate: no wait
		t.Fatal(err)
	}
	type result struct {
		ids []outbox.EventID
		err error
	}
	done := make(chan result, 1)
	go func() {
		ids, err := il.main.Enqueue(ctx, t2, payment("pay-1", 2))
		if err == nil {
			err = t2.Commit(ctx)
		}
		done <- result{ids, err}
	}()
	var second *result
	wait.Until(t, 30*time.Second, "the second producer to wait on a lock (or to commit)", func() (bool, error) {
		select {
		case r := <-done:
			second = &r
			return true, nil
		default:
		}
		var waiting bool
		err := il.pool.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, pid2).Scan(&waiting)
		return waiting, err
	})
	claimCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	c, err := il.main.Claim(claimCtx, store.ClaimRequest{RelayID: "r", Limit: 100, Lease: time.Minute, FailedBlocks: true})
	if err != nil {
		t.Fatalf("a claim while a producer waits: %v", err)
	}
	for _, e := range c.Events {
		if e.AggregateID == "pay-1" {
			t.Fatalf("a claim took pay-1's event %d while the producer of its earlier event had not committed "+
				"(the second producer did not wait: %v): it would be delivered first", e.ID, second != nil)
		}
	}
	if second != nil {
		t.Fatalf("the second producer of pay-1 committed while the first was open (err %v), and nothing kept the order", second.err)
	}
	if err := t1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("second producer: %v", r.err)
	}
	c, err = il.main.Claim(ctx, store.ClaimRequest{RelayID: "r", Limit: 100, Lease: time.Minute, FailedBlocks: true})
	if err != nil {
		t.Fatal(err)
	}
	var order []outbox.EventID
	others := 0
	for _, e := range c.Events {
		if e.AggregateID == "pay-1" {
			order = append(order, e.EventID)
		} else {
			others++
		}
	}
	if len(order) != 2 || order[0] != first[0] || order[1] != r.ids[0] || others != 1 {
		t.Fatalf("claimed pay-1 as %v (and %d others), want the first producer's event, then the second's (and pay-2)", order, others)
	}
}

func payment(agg string, n int) outbox.Event {
	return outbox.Event{AggregateType: "payment", AggregateID: agg, EventType: "ApprovalRequested",
		Payload: []byte(fmt.Sprintf(`{"n":%d}`, n))}
}

// goComplete runs s.Complete(req) in a goroutine (it is expected to wait on
// a lock) and returns the channel its result arrives on; an error fails
// the test.
func goComplete(t *testing.T, s *postgres.Store, req store.CompleteRequest) <-chan store.CompleteResult {
	completed := make(chan store.CompleteResult, 1)
	go func() {
		res, err := s.Complete(context.Background(), req)
		if err != nil {
			t.Errorf("complete: %v", err)
		}
		completed <- res
	}()
	return completed
}
