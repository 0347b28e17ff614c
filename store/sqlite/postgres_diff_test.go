package sqlite_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/internal/testenv/pgtest"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/sqlite"
)

// TestSameDecisionsAsPostgres runs random sequences of enqueues, claims,
// completions, sweeps, operator actions and purges against this backend and
// the PostgreSQL one (the reference) side by side, and checks after every
// step that both made the same decisions: the same events claimed, the same
// rows applied or fenced, the same statuses, retry counts, errors, audit
// trails, dead letters and counts. Times are compared only as far as both
// clocks allow (due or not). It needs PostgreSQL (OUTBOX_TEST_POSTGRES).
func TestSameDecisionsAsPostgres(t *testing.T) {
	dsn := testenv.Postgres.Addr(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	seeds, steps := 12, 60
	if testenv.Short() || raceEnabled {
		seeds, steps = 4, 40
	}
	for seed := 1; seed <= seeds; seed++ {
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) {
			t.Parallel()
			differential(t, pool, uint64(seed), steps)
		})
	}
}

func differential(t *testing.T, pool *pgxpool.Pool, seed uint64, steps int) {
	ctx := context.Background()
	table := fmt.Sprintf("sqlite_diff_%d_%d", time.Now().UnixNano()%1e9, seed)
	pg, err := postgres.New(pool, postgres.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pg.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pg.MigrateDown(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if _, err := pool.Exec(ctx, pgtest.DropTables(table)); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	e := newEnv(t, sqlite.Config{})
	lite := e.store
	rng := rand.New(rand.NewPCG(seed, 7))
	type claimPair struct{ pg, lite *store.Claim }
	var (
		all  []outbox.EventID
		open []claimPair
	)
	fixedPolicy, perOp := rng.IntN(4) != 0, seed%2 == 0
	last := e.dbNow(t)
	for step := 0; step < steps; step++ {
		// One operation per millisecond of SQLite's clock, so that its
		// millisecond timestamps order events as PostgreSQL's do.
		e.waitDBClockPast(t, last)
		fb := fixedPolicy
		if perOp {
			fb = rng.IntN(2) == 0
		}
		where := fmt.Sprintf("seed %d step %d", seed, step)
		switch op := rng.IntN(11); {
		case op < 3:
			var evs []outbox.Event
			for i, n := 0, 1+rng.IntN(4); i < n; i++ {
				x := ev(fmt.Sprintf("g%d", rng.IntN(6)), step)
				x.ID = outbox.NewEventID()
				switch rng.IntN(8) {
				case 0:
					x.Delay = time.Hour
				case 1:
					x.ExpiresAt = time.Now().Add(-time.Hour)
				}
				evs = append(evs, x)
				all = append(all, x.ID)
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pg.Enqueue(ctx, tx, evs...); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			e.enqueue(t, evs...)
		case op < 6:
			req := store.ClaimRequest{RelayID: "r", Limit: 1 + rng.IntN(12), Lease: time.Hour, FailedBlocks: fb}
			cp, err := pg.Claim(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			cl, err := lite.Claim(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if !sameIDs(eventIDs(cp), eventIDs(cl)) {
				t.Fatalf("%s: claim %+v: postgres took %v, sqlite %v", where, req, eventIDs(cp), eventIDs(cl))
			}
			for i := range cp.Events {
				if cp.Events[i].Expired != cl.Events[i].Expired || cp.Events[i].Attempt != cl.Events[i].Attempt {
					t.Fatalf("%s: claimed event %d: postgres %+v, sqlite %+v", where, i, cp.Events[i], cl.Events[i])
				}
			}
			if len(cp.Events) > 0 {
				open = append(open, claimPair{cp, cl})
			}
		case op < 8:
			if len(open) == 0 {
				continue
			}
			k := rng.IntN(len(open))
			pair := open[k]
			open = append(open[:k], open[k+1:]...)
			op, ol := outcomes(pair.pg, store.Delivered), outcomes(pair.lite, store.Delivered)
			kinds := []store.OutcomeKind{store.Delivered, store.Retry, store.Failed, store.Expired, store.Released}
			seen := map[string]map[store.OutcomeKind]bool{}
			for i := range op {
				kind := kinds[rng.IntN(len(kinds))]
				agg := pair.pg.Events[i].AggregateID
				if seen[agg] == nil {
					seen[agg] = map[store.OutcomeKind]bool{}
				}
				// With both RETRY and FAILED in one aggregate, PostgreSQL's
				// completeSQL would update the rows behind them twice (blk
				// and dfr) and keep one of the two changes, unpredictably.
				// The relay never sends both: after the first event of an
				// aggregate that is not delivered, it releases the rest.
				if (kind == store.Failed && seen[agg][store.Retry]) || (kind == store.Retry && seen[agg][store.Failed]) {
					kind = store.Delivered
				}
				seen[agg][kind] = true
				var retryIn time.Duration
				if rng.IntN(2) == 0 {
					retryIn = time.Hour
				}
				block, attempted := rng.IntN(2) == 0, rng.IntN(4) != 0
				for _, o := range []*store.Outcome{&op[i], &ol[i]} {
					o.Kind, o.RetryIn, o.Block, o.Attempted, o.Error = kind, retryIn, block, attempted, "error "+string(kind)
				}
			}
			rp, err := pg.Complete(ctx, store.CompleteRequest{Token: pair.pg.Token, RelayID: "r", FailedBlocks: fb, Outcomes: op})
			if err != nil {
				t.Fatal(err)
			}
			rl, err := lite.Complete(ctx, store.CompleteRequest{Token: pair.lite.Token, RelayID: "r", FailedBlocks: fb, Outcomes: ol})
			if err != nil {
				t.Fatal(err)
			}
			if len(rp.Applied) != len(rl.Applied) || len(rp.Fenced) != len(rl.Fenced) {
				t.Fatalf("%s: complete: postgres %+v, sqlite %+v", where, rp, rl)
			}
		case op < 9:
			req := store.SweepRequest{FailedBlocks: fb, Limit: rng.IntN(3)}
			rp, err := pg.Sweep(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			rl, err := lite.Sweep(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if rp != rl {
				t.Fatalf("%s: sweep: postgres %+v, sqlite %+v", where, rp, rl)
			}
		case op < 10:
			if len(all) == 0 {
				continue
			}
			a := store.OperatorAction{EventID: all[rng.IntN(len(all))], Actor: "op"}
			var ep, el error
			if rng.IntN(2) == 0 {
				ep, el = pg.Requeue(ctx, a), lite.Requeue(ctx, a)
			} else {
				ep, el = pg.Skip(ctx, a), lite.Skip(ctx, a)
			}
			if (ep == nil) != (el == nil) || (ep != nil && ep.Error() != el.Error()) {
				t.Fatalf("%s: operator action: postgres %v, sqlite %v", where, ep, el)
			}
		default:
			req := store.PurgeRequest{BatchSize: 1 + rng.IntN(3)}
			if rng.IntN(2) == 0 {
				req.Statuses = []outbox.Status{outbox.StatusProcessed, outbox.StatusExpired, outbox.StatusFailed, outbox.StatusSkipped}
			}
			np, err := pg.Purge(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			nl, err := lite.Purge(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if np != nl {
				t.Fatalf("%s: purge: postgres %d, sqlite %d", where, np, nl)
			}
			var kept []outbox.EventID
			for _, id := range all {
				if _, err := pg.GetEvent(ctx, id); err == nil {
					kept = append(kept, id)
				}
			}
			all = kept
		}
		sameState(t, where, pg, lite, all)
		last = e.dbNow(t)
	}
}

// sameState compares everything the two stores report.
func sameState(t *testing.T, where string, pg, lite store.Store, all []outbox.EventID) {
	t.Helper()
	ctx := context.Background()
	soon := time.Now().Add(time.Minute)
	for _, id := range all {
		a, err := pg.GetEvent(ctx, id)
		if err != nil {
			t.Fatalf("%s: postgres: %v", where, err)
		}
		b, err := lite.GetEvent(ctx, id)
		if err != nil {
			t.Fatalf("%s: sqlite: %v", where, err)
		}
		if a.Status != b.Status || a.RetryCount != b.RetryCount || a.LastError != b.LastError ||
			a.ExpiresAt.IsZero() != b.ExpiresAt.IsZero() || a.ProcessedAt.IsZero() != b.ProcessedAt.IsZero() ||
			a.LockedUntil.IsZero() != b.LockedUntil.IsZero() || a.AvailableAt.After(soon) != b.AvailableAt.After(soon) {
			t.Fatalf("%s: event %s (%s): postgres %+v\nsqlite %+v", where, id, a.AggregateID, a, b)
		}
		if pa, la := auditSummary(t, pg, id), auditSummary(t, lite, id); pa != la {
			t.Fatalf("%s: audit of %s: postgres %s, sqlite %s", where, id, pa, la)
		}
	}
	sp, err := pg.Stats(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	sl, err := lite.Stats(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(sp.Counts) != fmt.Sprint(sl.Counts) || sp.DeadLetters != sl.DeadLetters ||
		sp.BlockedAggregateCount != sl.BlockedAggregateCount || fmt.Sprint(sp.BlockedAggregates) != fmt.Sprint(sl.BlockedAggregates) {
		t.Fatalf("%s: stats: postgres %+v, sqlite %+v", where, sp, sl)
	}
	for _, fb := range []bool{true, false} {
		np, _ := pg.CountMovable(ctx, fb)
		nl, _ := lite.CountMovable(ctx, fb)
		if np != nl {
			t.Fatalf("%s: movable(%v): postgres %d, sqlite %d", where, fb, np, nl)
		}
	}
	lp, _ := pg.ListEvents(ctx, store.ListFilter{Limit: 1000})
	ll, _ := lite.ListEvents(ctx, store.ListFilter{Limit: 1000})
	if len(lp) != len(ll) {
		t.Fatalf("%s: list: postgres %d, sqlite %d", where, len(lp), len(ll))
	}
	for i := range lp {
		if lp[i].EventID != ll[i].EventID {
			t.Fatalf("%s: list order differs at %d", where, i)
		}
	}
	dp, _ := pg.DeadLetters(ctx, 1000)
	dl, _ := lite.DeadLetters(ctx, 1000)
	if len(dp) != len(dl) {
		t.Fatalf("%s: dead letters: postgres %d, sqlite %d", where, len(dp), len(dl))
	}
	// One completion inserts its dead letters in an order PostgreSQL does not define.
	byEvent := func(d []store.DeadLetter) {
		sort.Slice(d, func(i, j int) bool { return d[i].EventID.String() < d[j].EventID.String() })
	}
	byEvent(dp)
	byEvent(dl)
	for i := range dp {
		if dp[i].EventID != dl[i].EventID || dp[i].Reason != dl[i].Reason || dp[i].RetryCount != dl[i].RetryCount ||
			dp[i].RequeuedAt.IsZero() != dl[i].RequeuedAt.IsZero() {
			t.Fatalf("%s: dead letter %d: postgres %+v, sqlite %+v", where, i, dp[i], dl[i])
		}
	}
}

func auditSummary(t *testing.T, s store.Store, id outbox.EventID) string {
	t.Helper()
	atts, err := s.Attempts(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range atts {
		out = append(out, fmt.Sprintf("%s/%d/%s/%s", a.Outcome, a.Attempt, a.RelayID, a.Error))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
