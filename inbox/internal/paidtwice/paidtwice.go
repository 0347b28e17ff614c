// Package paidtwice is the end-to-end test of the inbox, shared by its
// HTTP and Kafka versions: the real `outbox relay` delivers a PostgreSQL
// backlog to a consumer that writes one business row (a charge) per event
// through the inbox, in its own PostgreSQL tables, and the relay is
// SIGKILLed mid-batch several times, so that events are delivered again.
// The consumer must end with exactly one charge per event, and the inbox
// must have counted every repeat it dropped.
//
// A kill is made "mid-batch" for sure: the test locks the outbox's table
// of delivery records (<table>_deliveries, EXCLUSIVE). The relay still
// claims and delivers, but it cannot record a delivery, since recording a
// batch writes its delivery record in the same statement. Once some event
// the consumer has charged is still PROCESSING (in a claim of the relay,
// <table>_claims: delivered, its outcome not recorded), the test SIGKILLs
// the relay, ends the relay's database sessions (a session waiting on the
// lock would otherwise still record the outcome after the process died)
// and releases the lock. Each such event is delivered again once the
// lease of its lane has ended: a duplicate the inbox must drop.
//
// After the first kill, the lock is taken only once what the kills left
// behind is settled: no claim of a killed relay is still PROCESSING, and
// every event a kill left unrecorded has been delivered again and
// recorded. Otherwise the relay could be left with nothing new to deliver
// while the lock is held, and the test with nothing to wait for until its
// context ended: a killed relay's claim that it never published (a batch
// behind the one it was recording) goes back to PENDING only when the
// reaper ends the claim, and it holds its aggregates meanwhile; and a batch that only delivers events again holds
// the batches behind it, yet gives no event the test has not seen.
package paidtwice

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the consumer's database/sql driver

	"github.com/txoutbox/outbox/inbox"
	"github.com/txoutbox/outbox/internal/e2etest"
	"github.com/txoutbox/outbox/internal/testenv"
)

// Fixture is the backlog in the producer's outbox and the consumer's
// database: its inbox and its charges table (no unique key on event_id,
// so that a charge made twice is two rows).
type Fixture struct {
	t       *testing.T
	Backlog *e2etest.Backlog
	N       int
	DB      *sql.DB // the consumer's
	Inbox   *inbox.Inbox
	charges string
	// unrecorded are the events that were charged and still PROCESSING
	// when a relay was killed: each is delivered again.
	unrecorded map[string]bool
	// killedTokens are the claim tokens of the rows that were PROCESSING
	// when a relay was killed: the next kill waits until none is left
	// (and until every unrecorded event is PROCESSED).
	killedTokens []string
	// Kills counts the relays killed mid-batch.
	Kills int
}

// New enqueues n events into an outbox of its own and prepares the
// consumer's tables; everything is dropped when the test passes.
func New(t *testing.T, prefix string, n int) *Fixture {
	t.Helper()
	f := &Fixture{t: t, N: n, unrecorded: map[string]bool{}}
	f.Backlog = e2etest.NewBacklog(t, prefix, n, e2etest.DefaultAggregates())
	db, err := sql.Open("pgx", testenv.Postgres.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(24)
	t.Cleanup(func() { db.Close() })
	f.DB = db
	suffix := make([]byte, 5)
	_, _ = rand.Read(suffix)
	f.charges = "charges_" + hex.EncodeToString(suffix)
	f.Inbox, err = inbox.New(db, inbox.Config{Table: "inbox_" + hex.EncodeToString(suffix), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := f.Inbox.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+f.charges+` (id BIGSERIAL PRIMARY KEY, event_id TEXT NOT NULL, amount BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kept the consumer's tables %s and %s for inspection", f.charges, f.Inbox.Tables().Inbox)
			return
		}
		tb := f.Inbox.Tables()
		for _, name := range []string{f.charges, tb.Sequences, tb.Inbox, tb.Migrations} {
			_, _ = db.ExecContext(context.Background(), `DROP TABLE IF EXISTS "`+name+`"`)
		}
	})
	return f
}

// Charge is the consumer's business effect: one charge row for the event,
// in the consumer's transaction.
func (f *Fixture) Charge(ctx context.Context, tx *sql.Tx, eventID string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO `+f.charges+` (event_id, amount) VALUES ($1, 1000)`, eventID)
	return err
}

// Charged returns the number of charge rows.
func (f *Fixture) Charged(ctx context.Context) (int, error) {
	var n int
	err := f.DB.QueryRowContext(ctx, `SELECT count(*) FROM `+f.charges).Scan(&n)
	return n, err
}

// RelayFlags are the relay settings of every run: short leases and sweeps
// so that a killed relay's batch is delivered again within seconds, and
// batches of 100. The lease is 3 s, not shorter: a claim gets half the
// lease, and on a loaded machine a claim of 100 rows under -race can take
// longer than half a second.
func RelayFlags() []string {
	return []string{"--lease", "3s", "--sweep-interval", "100ms", "--batch", "100", "--backoff-min", "10ms", "--backoff-max", "100ms"}
}

// Run starts the relay into sinkURL and kills it mid-batch up to `kills`
// times, then runs it with --drain until everything is PROCESSED. The
// first relay is killed in its first batches; each later one once it has
// recorded some events (the earlier relay's batch is then back with the
// sweeper), unless it recorded everything first, which ends the kills.
func (f *Fixture) Run(ctx context.Context, sinkURL string, kills int) {
	t := f.t
	t.Helper()
	for i := range kills {
		if !f.killMidBatch(ctx, sinkURL, i == 0) {
			t.Logf("the relay recorded every event before kill %d: %d kills", i+1, f.Kills)
			break
		}
	}
	relay := e2etest.StartCLI(t, f.Backlog.RelayArgs(sinkURL, RelayFlags()...)...)
	relay.Wait(ctx, t)
	if got := f.Backlog.Processed(t); got != f.N {
		t.Fatalf("%d of %d events PROCESSED after the drain", got, f.N)
	}
}

// killMidBatch starts a relay and SIGKILLs it at a moment when some events
// it delivered are charged but not yet recorded. With lockFirst the audit
// table is locked before the relay starts; otherwise once the relay has
// recorded more events. It returns false, without a kill, when the relay
// recorded every event first.
func (f *Fixture) killMidBatch(ctx context.Context, sinkURL string, lockFirst bool) bool {
	t := f.t
	t.Helper()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	appName := "paidtwice_relay_" + hex.EncodeToString(suffix)
	dsn, err := withApplicationName(f.Backlog.DSN, appName)
	if err != nil {
		t.Fatal(err)
	}
	start, err := f.processed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var lock *sql.Tx
	if lockFirst {
		if lock, err = f.lockDeliveries(ctx); err != nil {
			t.Fatal(err)
		}
		defer lock.Rollback()
	}
	args := f.Backlog.RelayArgs(sinkURL, append(RelayFlags(), "--db", dsn)...)
	relay := e2etest.StartCLI(t, slicesWithout(args, "--drain")...) // it runs until killed

	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for lock == nil {
		if relay.Exited() {
			t.Fatalf("the relay exited (%v) before it was killed:\n%s", relay.Err(), relay.Log())
		}
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for the relay to record events before kill %d: %v\n%s", f.Kills+1, ctx.Err(), relay.Log())
		case <-tick.C:
		}
		n, err := f.processed(ctx)
		if err != nil {
			t.Fatalf("count the PROCESSED events (before kill %d): %v\n%s", f.Kills+1, err, f.diagnose(relay))
		}
		var left int
		if n > start {
			if left, err = f.leftByKills(ctx); err != nil {
				t.Fatalf("count what the kills left (before kill %d): %v\n%s", f.Kills+1, err, f.diagnose(relay))
			}
		}
		switch {
		case n == f.N:
			return false
		case n > start && left == 0:
			if lock, err = f.lockDeliveries(ctx); err != nil {
				t.Fatal(err)
			}
			defer lock.Rollback()
		}
	}

	// The relay delivers but cannot record: wait until the consumer has
	// charged an event that is still PROCESSING.
	var pending []string
	for len(pending) == 0 {
		if relay.Exited() {
			t.Fatalf("the relay exited (%v) before it was killed:\n%s", relay.Err(), relay.Log())
		}
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for a charged event still PROCESSING (kill %d): %v; does recording a delivery still write %s_deliveries in the same statement?\n%s",
				f.Kills+1, ctx.Err(), f.Backlog.Table, relay.Log())
		case <-tick.C:
		}
		if pending, err = f.chargedUnrecorded(ctx, lock); err != nil {
			t.Fatalf("look for a charged event still PROCESSING (kill %d): %v\n%s", f.Kills+1, err, f.diagnose(relay))
		}
		if len(pending) == 0 {
			if n, err := f.processed(ctx); err != nil {
				t.Fatalf("count the PROCESSED events (kill %d): %v\n%s", f.Kills+1, err, f.diagnose(relay))
			} else if n == f.N {
				return false
			}
		}
	}
	relay.Kill()
	if err := f.endSessions(ctx, appName); err != nil {
		t.Fatal(err)
	}
	if err := f.noteKilledTokens(ctx, lock); err != nil {
		t.Fatal(err)
	}
	if err := lock.Commit(); err != nil {
		t.Fatal(err)
	}
	f.Kills++
	for _, id := range pending {
		f.unrecorded[id] = true
	}
	t.Logf("kill %d: SIGKILLed the relay with %d charged events not yet recorded (%d PROCESSED before it started)", f.Kills, len(pending), start)
	return true
}

func (f *Fixture) processed(ctx context.Context) (int, error) {
	var n int
	err := f.DB.QueryRowContext(ctx, `SELECT count(*) FROM "`+f.Backlog.Table+`" WHERE status = 'PROCESSED'`).Scan(&n)
	return n, err
}

// diagnose describes a stuck kill: the database sessions of the test's
// database that are not idle (what each runs, and the lock it waits
// for), the outbox's counts by status, and the relay's log. It has its
// own deadline, since it runs when the test's has passed.
func (f *Fixture) diagnose(relay *e2etest.Process) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	rows, err := f.DB.QueryContext(ctx, `SELECT pid, application_name, state, COALESCE(wait_event_type, ''), COALESCE(wait_event, ''),
		COALESCE(pg_blocking_pids(pid)::text, ''), left(regexp_replace(query, '\s+', ' ', 'g'), 160)
		FROM pg_stat_activity WHERE datname = current_database() AND state <> 'idle' AND pid <> pg_backend_pid() ORDER BY pid`)
	if err != nil {
		fmt.Fprintf(&b, "sessions: %v\n", err)
	} else {
		b.WriteString("sessions (pid, application, state, wait, blocked by, query):\n")
		for rows.Next() {
			var pid int
			var app, state, waitType, wait, blockers, query string
			if err := rows.Scan(&pid, &app, &state, &waitType, &wait, &blockers, &query); err != nil {
				fmt.Fprintf(&b, "  %v\n", err)
				break
			}
			fmt.Fprintf(&b, "  %d %s %s %s/%s %s %s\n", pid, app, state, waitType, wait, blockers, query)
		}
		rows.Close()
	}
	var counts string
	if err := f.DB.QueryRowContext(ctx, `SELECT COALESCE(string_agg(status || '=' || n, ' '), 'none') FROM (
		SELECT status, count(*) AS n FROM "`+f.Backlog.Table+`" GROUP BY status) s`).Scan(&counts); err != nil {
		counts = err.Error()
	}
	var claims int
	if err := f.DB.QueryRowContext(ctx, `SELECT count(*) FROM "`+f.Backlog.Table+`_claims"`).Scan(&claims); err != nil {
		claims = -1
	}
	charged, err := f.Charged(ctx)
	if err != nil {
		charged = -1
	}
	fmt.Fprintf(&b, "outbox: %s; %d claims in flight; %d charges\nrelay log:\n%s", counts, claims, charged, relay.Log())
	return b.String()
}

// noteKilledTokens adds the tokens of the claims in flight (the killed
// relay's, and any earlier one not yet reaped) to f.killedTokens.
func (f *Fixture) noteKilledTokens(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT token::text FROM "`+f.Backlog.Table+`_claims"`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var token string
		if err := rows.Scan(&token); err != nil {
			return err
		}
		f.killedTokens = append(f.killedTokens, token)
	}
	return rows.Err()
}

// leftByKills counts the rows the kills left unsettled: in a killed
// relay's claim not yet reaped, or charged by a kill's batch and not yet
// PROCESSED. Until there are none, the delivery records must not be
// locked (see the package documentation).
func (f *Fixture) leftByKills(ctx context.Context) (int, error) {
	if len(f.killedTokens) == 0 && len(f.unrecorded) == 0 {
		return 0, nil
	}
	ids := make([]string, 0, len(f.unrecorded))
	for id := range f.unrecorded {
		ids = append(ids, id)
	}
	var n int
	err := f.DB.QueryRowContext(ctx, `SELECT count(*) FROM "`+f.Backlog.Table+`" o
		WHERE (o.status = 'PENDING' AND EXISTS (SELECT 1 FROM "`+f.Backlog.Table+`_claims" c
		          WHERE o.id = ANY(c.ids) AND c.token::text = ANY(string_to_array($1, ','))))
		   OR (o.status <> 'PROCESSED' AND o.event_id::text = ANY(string_to_array($2, ',')))`,
		strings.Join(f.killedTokens, ","), strings.Join(ids, ",")).Scan(&n)
	return n, err
}

// lockDeliveries begins a transaction that holds the outbox's table of
// delivery records in EXCLUSIVE mode: reads go on, writes wait.
func (f *Fixture) lockDeliveries(ctx context.Context) (*sql.Tx, error) {
	tx, err := f.DB.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `SET LOCAL lock_timeout = '30s'`); err == nil {
		_, err = tx.ExecContext(ctx, `LOCK TABLE "`+f.Backlog.Table+`_deliveries" IN EXCLUSIVE MODE`)
	}
	if err != nil {
		_ = tx.Rollback()
		return nil, fmt.Errorf("lock the delivery records: %w", err)
	}
	return tx, nil
}

// chargedUnrecorded returns the events that are PROCESSING (PENDING in a
// claim in flight) and charged, and that no earlier kill left behind.
func (f *Fixture) chargedUnrecorded(ctx context.Context, tx *sql.Tx) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT o.event_id::text FROM "`+f.Backlog.Table+`" o
		WHERE o.status = 'PENDING' AND EXISTS (SELECT 1 FROM "`+f.Backlog.Table+`_claims" cl WHERE o.id = ANY(cl.ids))
		  AND EXISTS (SELECT 1 FROM `+f.charges+` c WHERE c.event_id = o.event_id::text)`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		if !f.unrecorded[id] {
			ids = append(ids, id)
		}
	}
	return ids, rows.Err()
}

// endSessions terminates the database sessions of the killed relay (one
// may be waiting on the lock with a statement that would record outcomes)
// and waits until they are gone.
func (f *Fixture) endSessions(ctx context.Context, appName string) error {
	if _, err := f.DB.ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, appName); err != nil {
		return err
	}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		var left int
		if err := f.DB.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, appName).Scan(&left); err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the killed relay's sessions did not end: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// Check asserts the outcome: exactly one charge per event and for every
// event, and the inbox dropped exactly the repeats (deliveries − events),
// at least one per event the kills left unrecorded. It logs the figures.
func (f *Fixture) Check(ctx context.Context, via string, deliveries int64) {
	t := f.t
	t.Helper()
	var rows, distinct, twice, unknown int
	if err := f.DB.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT event_id) FROM `+f.charges).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if err := f.DB.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT event_id FROM `+f.charges+` GROUP BY event_id HAVING count(*) > 1) d`).Scan(&twice); err != nil {
		t.Fatal(err)
	}
	if err := f.DB.QueryRowContext(ctx, `SELECT count(*) FROM `+f.charges+` c
		WHERE NOT EXISTS (SELECT 1 FROM "`+f.Backlog.Table+`" o WHERE o.event_id::text = c.event_id)`).Scan(&unknown); err != nil {
		t.Fatal(err)
	}
	// The sequence the inbox checked is the outbox's own aggregate_seq,
	// carried by the relay: per aggregate, the highest it recorded is the
	// aggregate's event count, and it saw neither a gap nor a reorder.
	var aggs, offSeq int
	if err := f.DB.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE s.last_seq IS DISTINCT FROM o.n)
		FROM (SELECT aggregate_type, aggregate_id, count(*) AS n, max(aggregate_seq) AS top FROM "`+f.Backlog.Table+`" GROUP BY 1, 2) o
		LEFT JOIN "`+f.Inbox.Tables().Sequences+`" s ON s.aggregate_type = o.aggregate_type AND s.aggregate_id = o.aggregate_id
		WHERE o.top = o.n`).Scan(&aggs, &offSeq); err != nil {
		t.Fatal(err)
	}
	st := f.Inbox.Stats()
	switch {
	case aggs == 0:
		t.Fatal("no aggregate of the backlog is numbered 1 to n in the outbox")
	case offSeq != 0:
		t.Fatalf("%d of %d aggregates: the inbox's last sequence is not the outbox's last aggregate_seq", offSeq, aggs)
	case st.Gaps != 0 || st.Reorders != 0:
		t.Fatalf("the inbox saw %d gaps and %d reorders in the relay's outbox-aggregate-seq", st.Gaps, st.Reorders)
	}
	t.Logf("paid twice, over %s: %d events, %d relays killed mid-batch leaving %d charged events unrecorded; delivered %d, duplicates delivered %d, charges %d, duplicates dropped by the inbox %d (inbox stats %+v)",
		via, f.N, f.Kills, len(f.unrecorded), deliveries, deliveries-int64(f.N), rows, st.Duplicates, st)
	switch {
	case twice != 0:
		t.Fatalf("%d events were charged more than once", twice)
	case unknown != 0:
		t.Fatalf("%d charges for events that were never enqueued", unknown)
	case rows != f.N || distinct != f.N:
		t.Fatalf("%d charges for %d distinct events, want one for each of the %d events", rows, distinct, f.N)
	case f.Kills == 0:
		t.Fatal("the relay was never killed mid-batch")
	case st.Duplicates != deliveries-int64(f.N):
		t.Fatalf("the inbox dropped %d duplicates, but %d deliveries of %d events make %d", st.Duplicates, deliveries, f.N, deliveries-int64(f.N))
	case st.Duplicates < int64(len(f.unrecorded)):
		t.Fatalf("the inbox dropped %d duplicates, fewer than the %d charged events the kills left unrecorded", st.Duplicates, len(f.unrecorded))
	case st.Processed != int64(f.N) || st.Failed != 0:
		t.Fatalf("inbox stats %+v: want %d processed, none failed", st, f.N)
	}
}

func withApplicationName(dsn, name string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("the test PostgreSQL DSN must be a URL: %w", err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func slicesWithout(args []string, drop string) []string {
	out := args[:0:0]
	for _, a := range args {
		if a != drop {
			out = append(out, a)
		}
	}
	return out
}
