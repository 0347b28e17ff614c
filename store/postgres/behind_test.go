package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink/discard"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/storetest"
)

// The lanes' cursors trust that ids are drawn in the order of the
// transactions that draw them. These tests break that on purpose: with a
// sequence cache (a DBA's setting), with a row set back to PENDING behind
// its cursor, and with a row written past the insert trigger.

// cursorTable is a migrated outbox with its own table, a plain connection
// per producer session, and the name of its id sequence.
type cursorTable struct {
	t     *testing.T
	table string
	pool  *pgxpool.Pool
	s     *postgres.Store
	log   *testenv.Buffer
	seq   string
}

func newCursorTable(t *testing.T, every time.Duration) *cursorTable {
	t.Helper()
	pool := newPool(t)
	ct := &cursorTable{t: t, table: storetest.TableName("pgcur"), pool: pool, log: &testenv.Buffer{}}
	ct.s = migratedStore(t, pool, postgres.Config{Table: ct.table, NoNotify: true})
	ct.s.SetSafetyNet(slog.New(slog.NewTextHandler(ct.log, nil)), every)
	if err := pool.QueryRow(context.Background(), `SELECT pg_get_serial_sequence($1, 'id')`, `"`+ct.table+`"`).Scan(&ct.seq); err != nil {
		t.Fatal(err)
	}
	return ct
}

// session is a producer's own connection: a sequence cache is per session.
func (ct *cursorTable) session() *pgx.Conn {
	ct.t.Helper()
	conn, err := pgx.Connect(context.Background(), testenv.Postgres.Addr(ct.t))
	if err != nil {
		ct.t.Fatal(err)
	}
	ct.t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// insert writes one event of aggregate agg with the producers' plain SQL
// and returns its id.
func (ct *cursorTable) insert(q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, agg string) int64 {
	ct.t.Helper()
	var id int64
	err := q.QueryRow(context.Background(), fmt.Sprintf(
		`INSERT INTO %q (aggregate_type, aggregate_id, event_type, payload) VALUES ('payment', $1, 'Approved', '{}') RETURNING id`,
		ct.table), agg).Scan(&id)
	if err != nil {
		ct.t.Fatal(err)
	}
	return id
}

func (ct *cursorTable) exec(sql string, args ...any) {
	ct.t.Helper()
	if _, err := ct.pool.Exec(context.Background(), sql, args...); err != nil {
		ct.t.Fatal(err)
	}
}

// deliver claims once as relayID and records every claimed event as
// delivered; it returns the claimed ids, in the claim's order.
func deliver(t *testing.T, s *postgres.Store, relayID string, lease time.Duration) []int64 {
	t.Helper()
	ctx := context.Background()
	c, err := s.Claim(ctx, store.ClaimRequest{RelayID: relayID, Limit: 100, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Events) == 0 {
		return nil
	}
	req := store.CompleteRequest{Token: c.Token, RelayID: relayID}
	var ids []int64
	for _, e := range c.Events {
		ids = append(ids, e.ID)
		req.Outcomes = append(req.Outcomes, store.Outcome{ID: e.ID, EventID: e.EventID, Kind: store.Delivered, Attempted: true,
			Attempt: e.Attempt, StartedAt: c.DBTime, FinishedAt: c.DBTime})
	}
	if _, err := s.Complete(ctx, req); err != nil {
		t.Fatal(err)
	}
	return ids
}

// status reads an event's status.
func (ct *cursorTable) status(id int64) outbox.Status {
	ct.t.Helper()
	var st string
	if err := ct.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT status FROM %q WHERE id = $1`, ct.table), id).Scan(&st); err != nil {
		ct.t.Fatal(err)
	}
	return outbox.Status(st)
}

// deliverUntilProcessed claims and delivers as relayID until every one of
// ids is PROCESSED, and returns every id it delivered, in order.
func (ct *cursorTable) deliverUntilProcessed(s *postgres.Store, relayID string, lease, timeout time.Duration, ids ...int64) []int64 {
	ct.t.Helper()
	var got []int64
	wait.Until(ct.t, timeout, fmt.Sprintf("events %v delivered", ids), func() (bool, error) {
		got = append(got, deliver(ct.t, s, relayID, lease)...)
		for _, id := range ids {
			if ct.status(id) != outbox.StatusProcessed {
				return false, nil
			}
		}
		return true, nil
	})
	return got
}

// settle delivers everything there is, then claims a few times more with
// nothing running on the table, so that the horizon settles every id and
// the cursors move past them.
func (ct *cursorTable) settle(s *postgres.Store, relayID string, lease time.Duration, ids []int64) {
	ct.t.Helper()
	ct.deliverUntilProcessed(s, relayID, lease, 2*time.Minute, ids...)
	for range 4 {
		if got := deliver(ct.t, s, relayID, lease); len(got) > 0 {
			ct.t.Fatalf("claimed %v again after every event was delivered", got)
		}
	}
}

// passCursors claims on, with every event delivered, until the cursor of
// each id's lane has passed it. The horizon settles an id only once no
// transaction older than it is open anywhere on the server, so on a
// shared server this can take a while; a test that sets a row back
// behind its cursor needs the cursor past it first.
func (ct *cursorTable) passCursors(s *postgres.Store, relayID string, lease time.Duration, ids []int64) {
	ct.t.Helper()
	lanes := map[int64]int{}
	rows, err := ct.pool.Query(context.Background(), fmt.Sprintf(`SELECT id, lane FROM %q WHERE id = ANY($1)`, ct.table), ids)
	if err != nil {
		ct.t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var lane int
		if err := rows.Scan(&id, &lane); err != nil {
			ct.t.Fatal(err)
		}
		lanes[id] = lane
	}
	if err := rows.Err(); err != nil {
		ct.t.Fatal(err)
	}
	wait.Until(ct.t, 2*time.Minute, "the lanes' cursors to pass the delivered events", func() (bool, error) {
		if got := deliver(ct.t, s, relayID, lease); len(got) > 0 {
			ct.t.Fatalf("claimed %v again after every event was delivered", got)
		}
		cursors := s.LaneCursors(relayID)
		for id, lane := range lanes {
			if cursors[lane] <= id {
				return false, nil
			}
		}
		return true, nil
	})
}

// A DBA sets a sequence cache while the relays run (the finding: 1,075 of
// 66,045 events stranded for good). A producer session draws a low id from
// the block it cached earlier, inside a transaction that stays open while
// the other session's events are delivered and the cursors would pass it;
// the relay is killed meanwhile and another takes its lanes. The late
// event is delivered, and the relays say what to change.
func TestLateCommitUnderSequenceCacheIsDelivered(t *testing.T) {
	ct := newCursorTable(t, 200*time.Millisecond)
	ctx := context.Background()
	const lease = 3 * time.Second
	a, b := ct.session(), ct.session()
	ct.exec(fmt.Sprintf(`ALTER SEQUENCE %s CACHE 50`, ct.seq))

	first := ct.insert(a, "cache-a") // a caches ids first..first+49
	var ids []int64
	for i := range 200 {
		ids = append(ids, ct.insert(b, fmt.Sprintf("cache-b-%d", i))) // b's blocks: above a's
	}
	if ids[0] < first+50 {
		t.Fatalf("session b drew %d, inside session a's cached block from %d: the sequence cache is not in effect", ids[0], first)
	}
	ct.settle(ct.s, "relay-1", lease, append([]int64{first}, ids...))

	// A transaction of session a draws an id from its cached block, below
	// every id delivered, and stays open while the relay claims on.
	tx, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	late := ct.insert(tx, "cache-b-7") // an aggregate whose lane has delivered rows above it
	if late > ids[0] {
		t.Fatalf("the late event drew id %d, above the delivered %d: not from session a's cached block", late, ids[0])
	}
	// relay-1 claims on until it has renewed the late event's lane since
	// then: the renewal stores the lane's cursor, from which the next
	// holder reads.
	var lane int
	var renewed int64
	laneSQL := fmt.Sprintf(`SELECT a.lane, l.lease_until_ms FROM %q a JOIN %q l ON l.lane = a.lane WHERE a.aggregate_id = 'cache-b-7'`,
		ct.table+"_aggregates", ct.table+"_lanes")
	if err := ct.pool.QueryRow(ctx, laneSQL).Scan(&lane, &renewed); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, time.Minute, "relay-1 renews the late event's lane", func() (bool, error) {
		deliver(t, ct.s, "relay-1", lease)
		var until int64
		err := ct.pool.QueryRow(ctx, laneSQL).Scan(&lane, &until)
		return until > renewed, err
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// relay-1 is gone (killed: it releases nothing); relay-2 takes its
	// lanes when their leases end.
	s2, err := postgres.New(ct.pool, postgres.Config{Table: ct.table, NoNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	log2 := &testenv.Buffer{}
	s2.SetSafetyNet(slog.New(slog.NewTextHandler(log2, nil)), 200*time.Millisecond)
	ct.deliverUntilProcessed(s2, "relay-2", lease, 2*time.Minute, late)

	// Every relay that claimed says which setting draws ids out of order.
	for name, buf := range map[string]*testenv.Buffer{"relay-1": ct.log, "relay-2": log2} {
		wait.For(t, time.Minute, name+" logs the sequence cache as an ERROR", func() bool {
			if len(buf.Lines("level=ERROR", "CACHE 50", "CACHE 1")) > 0 {
				return true
			}
			deliver(t, map[string]*postgres.Store{"relay-1": ct.s, "relay-2": s2}[name], name, lease)
			return false
		})
	}
	if n := ct.s.FoundBehindCursors() + s2.FoundBehindCursors(); n != 0 {
		// The cursors stopped at the cache: nothing got behind them.
		t.Errorf("the safety net found %d events behind the cursors; want 0 (the horizon must not trust a cached sequence)", n)
	}
}

// The relay refuses to start, and migrate to run, on settings that draw ids
// out of order, each with the statement that fixes it.
func TestIDOrderSettingsAreRefusedAtStart(t *testing.T) {
	ct := newCursorTable(t, -1)
	ctx := context.Background()
	if err := ct.s.CheckIDOrder(ctx); err != nil {
		t.Fatalf("a migrated outbox: %v", err)
	}
	cases := []struct {
		name, set, reset, want string
	}{
		{"cache", `ALTER SEQUENCE %s CACHE 20`, `ALTER SEQUENCE %s CACHE 1`, "CACHE 1"},
		{"cycle", `ALTER SEQUENCE %s CYCLE`, `ALTER SEQUENCE %s NO CYCLE`, "NO CYCLE"},
		{"descending", `ALTER SEQUENCE %s INCREMENT -1 MINVALUE -1000`, `ALTER SEQUENCE %s INCREMENT 1`, "INCREMENT 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ct.exec(fmt.Sprintf(c.set, ct.seq))
			defer ct.exec(fmt.Sprintf(c.reset, ct.seq))
			err := ct.s.CheckIDOrder(ctx)
			seq := ct.seq[strings.LastIndex(ct.seq, ".")+1:] // without its schema
			if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "ALTER SEQUENCE "+seq+" "+c.want) {
				t.Fatalf("CheckIDOrder: %v; want ErrInvalidConfig naming ALTER SEQUENCE %s %s", err, seq, c.want)
			}
			if _, err := ct.s.MigrateUp(ctx); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("MigrateUp: %v; want the same refusal", err)
			}
			r, err := relay.New(relay.Config{Store: ct.s, Sink: discard.New(), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			runCtx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := r.Run(runCtx); !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("relay.Run: %v; want it to refuse to start, naming %s", err, c.want)
			}
		})
	}
	t.Run("trigger disabled", func(t *testing.T) {
		ct.exec(fmt.Sprintf(`ALTER TABLE %q DISABLE TRIGGER %q`, ct.table, ct.table+"_before_insert"))
		defer ct.exec(fmt.Sprintf(`ALTER TABLE %q ENABLE TRIGGER %q`, ct.table, ct.table+"_before_insert"))
		err := ct.s.CheckIDOrder(ctx)
		if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "ENABLE TRIGGER") {
			t.Fatalf("CheckIDOrder: %v; want ErrInvalidConfig naming ENABLE TRIGGER", err)
		}
	})
	if err := ct.s.CheckIDOrder(ctx); err != nil {
		t.Fatalf("after every setting was put back: %v", err)
	}
}

// Whatever the mechanism, a PENDING row behind its lane's cursor is found
// by the safety net, delivered before the later events of its aggregate
// still waiting when it was found, logged as an ERROR with its id and
// counted. Two rows are put there on purpose: a delivered row set back to
// PENDING, and a row written past the insert trigger
// (session_replication_role = replica, as pg_restore and logical
// replication write), which has no lane at all. The net runs at every
// claim here, so that the first claim after the break finds them.
func TestSafetyNetDeliversEventsBehindTheCursors(t *testing.T) {
	ct := newCursorTable(t, time.Nanosecond)
	ctx := context.Background()
	const lease = 30 * time.Second
	p := ct.session()
	var ids []int64
	for i := range 150 {
		ids = append(ids, ct.insert(p, fmt.Sprintf("net-%d", i)))
	}
	ct.settle(ct.s, "relay-1", lease, ids)
	ct.passCursors(ct.s, "relay-1", lease, ids)

	passed := ids[10] // aggregate net-10
	ct.exec(fmt.Sprintf(`UPDATE %q SET status = 'PENDING', processed_at = NULL WHERE id = $1`, ct.table), passed)
	next := ct.insert(p, "net-10") // a later event of the same aggregate, ahead of the cursor
	var loose int64
	err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %q (id, event_id, aggregate_type, aggregate_id, event_type, payload)
			VALUES (nextval($1), gen_random_uuid(), 'payment', 'net-loose', 'Approved', '{}') RETURNING id`, ct.table), ct.seq).Scan(&loose)
	})
	if err != nil {
		t.Fatal(err)
	}

	got := ct.deliverUntilProcessed(ct.s, "relay-1", lease, 2*time.Minute, passed, next, loose)
	if i, j := slices.Index(got, passed), slices.Index(got, next); i < 0 || j < 0 || i > j {
		t.Errorf("delivered %v: want %d (behind the cursor) before %d, the next event of its aggregate", got, passed, next)
	}
	if n := ct.s.FoundBehindCursors(); n != 2 {
		t.Errorf("FoundBehindCursors = %d, want 2", n)
	}
	for _, id := range []int64{passed, loose} {
		if lines := ct.log.Lines("level=ERROR", "behind their lane's cursor", fmt.Sprint(id)); len(lines) == 0 {
			t.Errorf("no ERROR names event %d; log:\n%s", id, ct.log.String())
		}
	}
}

// A row passed by its lane's cursor within the last minute is read again
// at every pass, up to lanes.RecentRows rows behind the cursor, wherever
// the sweep through the lane's history stands: a row set back to PENDING
// 3,000 rows behind the cursor of a lane of 5,000 delivered events (one
// aggregate) is found by the first pass after it.
func TestSafetyNetReadsTheLastMinuteBehindTheCursor(t *testing.T) {
	ct := newCursorTable(t, time.Nanosecond)
	const lease = 30 * time.Second
	var ids []int64
	err := ct.pool.QueryRow(context.Background(), fmt.Sprintf(`WITH ins AS (
		INSERT INTO %q (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'payment', 'minute-1', 'Approved', '{}' FROM generate_series(1, 5000) RETURNING id)
		SELECT array_agg(id ORDER BY id) FROM ins`, ct.table)).Scan(&ids)
	if err != nil {
		t.Fatal(err)
	}
	// Delivered long ago: the claims move the cursor past finished rows.
	ct.exec(fmt.Sprintf(`UPDATE %q SET status = 'PROCESSED', processed_at = now()`, ct.table))
	ct.settle(ct.s, "relay-1", lease, ids)
	ct.passCursors(ct.s, "relay-1", lease, []int64{ids[len(ids)-3000]})

	passed := ids[len(ids)-3000]
	ct.exec(fmt.Sprintf(`UPDATE %q SET status = 'PENDING', processed_at = NULL WHERE id = $1`, ct.table), passed)
	before := ct.s.FoundBehindCursors()
	deliver(t, ct.s, "relay-1", lease) // one claim, one pass of the net
	if found := ct.s.FoundBehindCursors() - before; found != 1 {
		t.Fatalf("the pass after the break found %d events, want 1 (event %d, 3,000 rows behind the cursor); log:\n%s",
			found, passed, ct.log.String())
	}
	ct.deliverUntilProcessed(ct.s, "relay-1", lease, time.Minute, passed)
}
