package storetest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/audit"
	"github.com/txoutbox/outbox/store"
)

// RunAuditChain checks the audit chain (store/chain.go): an untouched
// trail verifies, and one UPDATE or DELETE made by SQL on an attempts row,
// a route change, an audit note or the chain itself is found and named.
// It needs Harness.SQL.
func RunAuditChain(t *testing.T, newHarness Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
	}{
		{"UntouchedTrailVerifies", testChainUntouched},
		{"ChangedAttemptIsNamed", testChainChangedAttempt},
		{"DeletedAttemptIsNamed", testChainDeletedAttempt},
		{"ChangedOperatorRowsAreNamed", testChainChangedOperatorRows},
		{"EditedLinkIsNamed", testChainEditedLink},
		{"HiddenRecordIsNamed", testChainHiddenRecord},
		{"DeletedTailNeedsAnAnchor", testChainDeletedTail},
		{"RetentionExcusesOlderRecords", testChainRetention},
		{"PurgeIsNotTampering", testChainPurge},
		{"HistoryKeepsTheTrail", testChainHistory},
		{"HistoryDropIsNotTampering", testChainHistoryDrop},
		{"ConcurrentWritersChainInOrder", testChainConcurrentWriters},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			if h.SQL == nil {
				t.Skip("the harness has no SQL handle")
			}
			tc.fn(t, h)
		})
	}
}

// chainTrail writes a trail with every kind of record: retried and failed
// attempts, an operator requeue, a route change by hand and an audit
// note. It returns the failed event's id.
func chainTrail(t *testing.T, h *Harness) outbox.EventID {
	t.Helper()
	ctx := context.Background()
	Enqueue(t, h, PaymentEvent("chain-a", 0), PaymentEvent("chain-b", 0))
	c := claim(t, h.Store, 10, time.Minute, true)
	if len(c.Events) != 2 {
		t.Fatalf("claimed %d events, want 2", len(c.Events))
	}
	outs := outcomes(c, store.Retry)
	outs[1].Kind = store.Failed
	for i := range outs {
		outs[i].RetryIn = time.Hour
	}
	complete(t, h.Store, c, true, outs)
	failed := c.Events[1].EventID
	if err := h.Store.Requeue(ctx, store.OperatorAction{EventID: failed, Actor: "operator:alice", Reason: "gateway fixed"}); err != nil {
		t.Fatalf("requeue: %v", err)
	}
	if _, err := h.Store.ChangeRoute(ctx, store.RouteChange{Route: "gateway", To: store.BreakerOpen, Forced: true,
		Actor: "operator:alice", Reason: "maintenance window"}); err != nil {
		t.Fatalf("open the route by hand: %v", err)
	}
	chain := h.Store.AuditChain()
	defer chain.Close()
	if _, err := chain.AddNote(ctx, store.AuditNote{Kind: "note", Actor: "operator:alice", Detail: `{"text":"checked"}`}); err != nil {
		t.Fatalf("add a note: %v", err)
	}
	return failed
}

// verify runs audit.Verify on h's chain.
func verify(t *testing.T, h *Harness, o audit.Options) audit.Report {
	t.Helper()
	chain := h.Store.AuditChain()
	defer chain.Close()
	r, err := audit.Verify(context.Background(), chain, h.Table, o)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return r
}

// exec runs a statement of the test's, as someone with SQL access would.
func exec(t *testing.T, h *Harness, query string, args ...any) int64 {
	t.Helper()
	if h.Bind != nil {
		query = h.Bind(query)
	}
	res, err := h.SQL.ExecContext(context.Background(), query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// wantProblem fails unless the report's first problem names kind and
// holds all of what.
func wantProblem(t *testing.T, r audit.Report, kind store.ChainKind, what ...string) audit.Problem {
	t.Helper()
	if r.OK() {
		t.Fatalf("verify passed after the change; want a problem naming the %s record (report %+v)", kind, r)
	}
	p := r.Problems[0]
	if p.Kind != kind {
		t.Fatalf("first problem %q names kind %q; want %q (all: %v)", p, p.Kind, kind, r.Problems)
	}
	for _, w := range what {
		if !strings.Contains(p.String(), w) {
			t.Fatalf("first problem %q does not say %q", p, w)
		}
	}
	return p
}

func testChainUntouched(t *testing.T, h *Harness) {
	chainTrail(t, h)
	r := verify(t, h, audit.Options{})
	if !r.OK() {
		t.Fatalf("an untouched trail does not verify: %v", r.Problems)
	}
	// Two attempts, the requeue, the route change and the note.
	if r.ByKind[store.ChainAttempt] != 3 || r.ByKind[store.ChainRoute] != 1 || r.ByKind[store.ChainNote] != 1 || r.Links != 5 {
		t.Fatalf("links by kind %v (%d in all); want 3 attempts, 1 route change, 1 note", r.ByKind, r.Links)
	}
	if r.Head.Seq != 5 || len(r.Head.Hash) != 64 || r.Head.Hash == store.GenesisHash {
		t.Fatalf("head %+v; want link 5 and its hash", r.Head)
	}
}

func testChainChangedAttempt(t *testing.T, h *Harness) {
	failed := chainTrail(t, h)
	attempts := tablesOf(t, h).Attempts
	if n := exec(t, h, "UPDATE "+attempts+" SET error = 'all good' WHERE event_id = ? AND outcome = 'FAILED'", failed.String()); n != 1 {
		t.Fatalf("updated %d rows, want 1", n)
	}
	p := wantProblem(t, verify(t, h, audit.Options{}), store.ChainAttempt, failed.String(), "/FAILED", "changed")
	if p.Seq != 2 {
		t.Fatalf("problem at link %d; want link 2 (the FAILED attempt)", p.Seq)
	}
}

func testChainDeletedAttempt(t *testing.T, h *Harness) {
	failed := chainTrail(t, h)
	attempts := tablesOf(t, h).Attempts
	if n := exec(t, h, "DELETE FROM "+attempts+" WHERE event_id = ? AND outcome = 'REQUEUED'", failed.String()); n != 1 {
		t.Fatalf("deleted %d rows, want 1", n)
	}
	wantProblem(t, verify(t, h, audit.Options{}), store.ChainAttempt, failed.String(), "/REQUEUED", "deleted")
}

func testChainChangedOperatorRows(t *testing.T, h *Harness) {
	chainTrail(t, h)
	tables := tablesOf(t, h)
	exec(t, h, "UPDATE "+tables.RouteLogTable()+" SET actor = 'operator:mallory'")
	wantProblem(t, verify(t, h, audit.Options{}), store.ChainRoute, "changed")
	exec(t, h, "UPDATE "+tables.RouteLogTable()+" SET actor = 'operator:alice'")
	if r := verify(t, h, audit.Options{}); !r.OK() {
		t.Fatalf("the route change put back as it was does not verify: %v", r.Problems)
	}
	exec(t, h, "DELETE FROM "+tables.AuditLogTable())
	wantProblem(t, verify(t, h, audit.Options{}), store.ChainNote, "deleted")
}

func testChainEditedLink(t *testing.T, h *Harness) {
	chainTrail(t, h)
	// Someone rewrites the digest of link 3 to match a changed record.
	exec(t, h, "UPDATE "+tablesOf(t, h).ChainTable()+" SET digest = ? WHERE seq = 3", strings.Repeat("a", 64))
	r := verify(t, h, audit.Options{})
	if r.OK() || r.Problems[0].Seq != 3 || !strings.Contains(r.Problems[0].What, "does not follow") {
		t.Fatalf("problems %v; want link 3 named first as not following from link 2", r.Problems)
	}
}

// testChainHiddenRecord hides a record by deleting its link and setting the
// head back: the links verify, and the safety net (records in no link)
// names it.
func testChainHiddenRecord(t *testing.T, h *Harness) {
	chainTrail(t, h)
	tables := tablesOf(t, h)
	var hash string
	q := "SELECT hash FROM " + tables.ChainTable() + " WHERE seq = 4"
	if err := h.SQL.QueryRowContext(context.Background(), q).Scan(&hash); err != nil {
		t.Fatal(err)
	}
	exec(t, h, "DELETE FROM "+tables.ChainTable()+" WHERE seq = 5")
	exec(t, h, "UPDATE "+tables.ChainHeadTable()+" SET seq = 4, hash = ? WHERE id = 1", hash)
	p := wantProblem(t, verify(t, h, audit.Options{}), store.ChainNote, "in no link")
	if p.Seq != 0 {
		t.Fatalf("problem %+v names a link; want the note named by the safety net", p)
	}
}

// testChainDeletedTail deletes the tail of the chain with its records and
// sets the head back (MySQL's and SQLite's head row; PostgreSQL's head is
// the last link): only an anchor kept outside the database shows it.
func testChainDeletedTail(t *testing.T, h *Harness) {
	ctx := context.Background()
	chainTrail(t, h)
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	chain := h.Store.AuditChain()
	defer chain.Close()
	a, err := audit.NewAnchor(ctx, chain, h.Table, key, "operator:alice")
	if err != nil {
		t.Fatalf("anchor: %v", err)
	}
	if a.Seq != 5 || !a.Verify(pub) {
		t.Fatalf("anchor %+v; want link 5, signed", a)
	}
	opts := audit.Options{Keys: []ed25519.PublicKey{pub}}
	if r := verify(t, h, opts); !r.OK() || r.Anchors != 1 || r.Links != 6 {
		t.Fatalf("anchored trail: OK %v, %d anchors, %d links, problems %v; want OK, 1 anchor, 6 links", r.OK(), r.Anchors, r.Links, r.Problems)
	}
	if r := verify(t, h, audit.Options{}); !r.OK() || r.Unchecked != 1 {
		t.Fatalf("without the key: OK %v, %d unchecked; want OK and the anchor unchecked", r.OK(), r.Unchecked)
	}
	// Delete links 4 to 6 with their records (the route change, the note
	// and the anchor itself) and set the head back to link 3.
	tables := tablesOf(t, h)
	var hash string
	if err := h.SQL.QueryRowContext(ctx, "SELECT hash FROM "+tables.ChainTable()+" WHERE seq = 3").Scan(&hash); err != nil {
		t.Fatal(err)
	}
	exec(t, h, "DELETE FROM "+tables.ChainTable()+" WHERE seq >= 4")
	exec(t, h, "DELETE FROM "+tables.RouteLogTable())
	exec(t, h, "DELETE FROM "+tables.AuditLogTable())
	exec(t, h, "UPDATE "+tables.ChainHeadTable()+" SET seq = 3, hash = ? WHERE id = 1", hash)
	if r := verify(t, h, opts); !r.OK() {
		t.Fatalf("problems %v; with its anchor gone from the database, a cut tail cannot be seen", r.Problems)
	}
	opts.External = []audit.Anchor{a}
	r := verify(t, h, opts)
	if r.OK() || !strings.Contains(r.Problems[0].What, "covers link 5, but the chain ends at link 3") {
		t.Fatalf("problems %v; want the kept anchor to show links deleted from the tail", r.Problems)
	}
	forged := a
	forged.Seq = 3
	opts.External = []audit.Anchor{forged}
	if r := verify(t, h, opts); r.OK() || !strings.Contains(r.Problems[0].What, "does not verify") {
		t.Fatalf("problems %v; want an edited anchor refused", r.Problems)
	}
}

func testChainRetention(t *testing.T, h *Harness) {
	ctx := context.Background()
	failed := chainTrail(t, h)
	chain := h.Store.AuditChain()
	defer chain.Close()
	head, err := chain.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	links, err := chain.Links(ctx, 0, 10)
	if err != nil || len(links) != int(head.Seq) {
		t.Fatalf("links %v, %v; want %d", links, err, head.Seq)
	}
	detail, _ := json.Marshal(map[string]any{"cutoff_ms": links[len(links)-1].ChainedMS + 1, "what": "attempts of events finished before the cutoff"})
	if _, err := chain.AddNote(ctx, store.AuditNote{Kind: store.NoteRetention, Actor: "relay:test", Detail: string(detail)}); err != nil {
		t.Fatal(err)
	}
	attempts := tablesOf(t, h).Attempts
	exec(t, h, "DELETE FROM "+attempts+" WHERE event_id = ?", failed.String())
	r := verify(t, h, audit.Options{})
	if !r.OK() || r.Retained != 2 {
		t.Fatalf("OK %v, retained %d, problems %v; want the FAILED and REQUEUED rows excused by the retention note", r.OK(), r.Retained, r.Problems)
	}
}

// testChainConcurrentWriters writes attempts from several transactions at
// once: the links are numbered without gaps and verify.
func testChainConcurrentWriters(t *testing.T, h *Harness) {
	const writers, rounds = 4, 5
	n := int(float64(writers*rounds) * max(h.Scale, 0.5))
	for i := range n {
		Enqueue(t, h, PaymentEvent(fmt.Sprintf("chain-%d", i), 0))
	}
	var claims []*store.Claim
	for len(claims) < n {
		c := claim(t, h.Store, 1, time.Minute, true)
		if len(c.Events) == 0 {
			t.Fatalf("claimed nothing after %d of %d claims", len(claims), n)
		}
		claims = append(claims, c)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, c := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs := outcomes(c, store.Retry)
			outs[0].RetryIn = time.Hour
			for {
				_, err := h.Store.Complete(context.Background(), store.CompleteRequest{Token: c.Token, RelayID: "test", FailedBlocks: true, Outcomes: outs})
				if err == nil || h.Conflict == nil || !h.Conflict(err) {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("complete: %v", err)
		}
	}
	r := verify(t, h, audit.Options{})
	if !r.OK() || r.ByKind[store.ChainAttempt] != int64(n) {
		t.Fatalf("OK %v, %d attempt links, problems %v; want %d attempts chained", r.OK(), r.ByKind[store.ChainAttempt], r.Problems, n)
	}
}

func tablesOf(t *testing.T, h *Harness) store.Tables {
	t.Helper()
	tables, err := store.TablesFor(h.Table)
	if err != nil {
		t.Fatal(err)
	}
	return tables
}

// testChainPurge: the retention purge deletes delivered events with their
// attempts and notes it (store.RecordRetention), so verify still passes;
// without the note the deleted attempts are named.
func testChainPurge(t *testing.T, h *Harness) {
	ctx := context.Background()
	chainTrail(t, h)
	c := claim(t, h.Store, 10, time.Minute, true)
	if len(c.Events) != 1 {
		t.Fatalf("claimed %d events, want the requeued one", len(c.Events))
	}
	complete(t, h.Store, c, true, outcomes(c, store.Delivered))
	n, err := h.Store.Purge(ctx, store.PurgeRequest{Statuses: []outbox.Status{outbox.StatusProcessed}})
	if err != nil || n != 1 {
		t.Fatalf("purge: %d, %v; want the delivered event", n, err)
	}
	if r := verify(t, h, audit.Options{}); r.OK() {
		t.Fatal("verify passed after a purge that noted nothing; want its deleted attempts named")
	}
	if err := store.RecordRetention(ctx, h.Store, 0, n, "relay:test", "a test's purge"); err != nil {
		t.Fatal(err)
	}
	r := verify(t, h, audit.Options{})
	if !r.OK() || r.Retained != 2 {
		t.Fatalf("OK %v, retained %d, problems %v; want the FAILED and REQUEUED rows of the purged event retained", r.OK(), r.Retained, r.Problems)
	}
}

// chainHistory delivers the trail's two events and moves them into the
// history, returning the failed-then-requeued event's id.
func chainHistory(t *testing.T, h *Harness) outbox.EventID {
	t.Helper()
	failed := chainTrail(t, h)
	// The requeued event is due (the retried one waits an hour).
	c := claim(t, h.Store, 10, time.Minute, true)
	if len(c.Events) != 1 || c.Events[0].EventID != failed {
		t.Fatalf("claimed %v, want the requeued event %s", ids(c), failed)
	}
	complete(t, h.Store, c, true, outcomes(c, store.Delivered))
	if n := moveToHistory(t, h, store.HistoryMoveRequest{}); n != 1 {
		t.Fatalf("moved %d events into history, want the delivered one", n)
	}
	return failed
}

// testChainHistory: an event moved into the history is chained there, its
// attempts, moved into the attempts' history, still match their links, and
// an UPDATE of a history row or a DELETE of a moved attempt is named.
func testChainHistory(t *testing.T, h *Harness) {
	failed := chainHistory(t, h)
	r := verify(t, h, audit.Options{})
	if !r.OK() || r.ByKind[store.ChainEvent] != 1 {
		t.Fatalf("after the move: OK %v, %d event links, problems %v; want it to verify with the moved event chained", r.OK(), r.ByKind[store.ChainEvent], r.Problems)
	}
	tables := tablesOf(t, h)
	var retries int
	q := "SELECT retry_count FROM " + tables.Outbox + "_history WHERE event_id = ?"
	if h.Bind != nil {
		q = h.Bind(q)
	}
	if err := h.SQL.QueryRowContext(context.Background(), q, failed.String()).Scan(&retries); err != nil {
		t.Fatal(err)
	}
	exec(t, h, "UPDATE "+tables.Outbox+"_history SET retry_count = ? WHERE event_id = ?", retries+5, failed.String())
	wantProblem(t, verify(t, h, audit.Options{}), store.ChainEvent, failed.String(), "changed")
	exec(t, h, "UPDATE "+tables.Outbox+"_history SET retry_count = ? WHERE event_id = ?", retries, failed.String())
	if r := verify(t, h, audit.Options{}); !r.OK() {
		t.Fatalf("the history row put back does not verify: %v", r.Problems)
	}
	if n := exec(t, h, "DELETE FROM "+tables.Outbox+"_attempts_history WHERE event_id = ? AND outcome = 'FAILED'", failed.String()); n != 1 {
		t.Fatalf("deleted %d moved attempts, want 1", n)
	}
	wantProblem(t, verify(t, h, audit.Options{}), store.ChainAttempt, failed.String(), "/FAILED", "deleted")
}

// testChainHistoryDrop: dropping a month of history with its note is not
// tampering; without the note it is named.
func testChainHistoryDrop(t *testing.T, h *Harness) {
	ctx := context.Background()
	chainHistory(t, h)
	// A cutoff two months ahead drops this month, whatever the clocks.
	now := time.Now().UTC()
	drop, err := h.Store.DropHistoryBefore(ctx, time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC).AddDate(0, 2, 0))
	if err != nil || drop.Events() != 1 {
		t.Fatalf("drop = %+v, %v; want this month's one event", drop, err)
	}
	if r := verify(t, h, audit.Options{}); r.OK() {
		t.Fatal("verify passed after months were dropped without a note; want their records named")
	}
	if err := store.RecordHistoryDrop(ctx, h.Store, drop, "relay:test"); err != nil {
		t.Fatal(err)
	}
	r := verify(t, h, audit.Options{})
	// The event (its delivery on its history row) and its FAILED and
	// REQUEUED attempts went with the month.
	if !r.OK() || r.Retained != 3 {
		t.Fatalf("OK %v, retained %d, problems %v; want the dropped month's records retained", r.OK(), r.Retained, r.Problems)
	}
}
