package relaytest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/audit"
	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/sink/httpsink"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/storetest"
)

// RunEncryption checks payload encryption end to end through the real
// relay: the plaintext reaches the destination and no table holds it,
// a key rotation while the relay delivers keeps every event readable, and
// a shredded subject's events end FAILED, never sent, while the others
// are delivered.
func RunEncryption(t *testing.T, newHarness storetest.Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *storetest.Harness)
	}{
		{"MarkerInNoTableGatewayGetsPlaintext", testMarkerInNoTable},
		{"RotationWhileDelivering", testRotationWhileDelivering},
		{"ShreddedSubjectNeverSent", testShreddedSubject},
		{"EnvelopeWrittenByPlainSQL", testEnvelopeFromPlainSQL},
		{"RelayWithoutTheKeyGivesBack", testRelayWithoutKeyGivesBack},
		{"PlainRowsSealedByTheRelay", testPlainRowsSealedByTheRelay},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			if h.Sealing == nil || h.SQL == nil {
				t.Fatal("the harness needs Sealing and SQL for the encryption suite")
			}
			tc.fn(t, h)
		})
	}
}

func newMarker(t *testing.T) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "MARKER-" + hex.EncodeToString(b)
}

// markerGateway is an HTTP destination that keeps every body it receives and
// refuses, with 422, those that ask to fail.
type markerGateway struct {
	mu     sync.Mutex
	bodies [][]byte
}

func (g *markerGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	g.mu.Lock()
	g.bodies = append(g.bodies, body)
	g.mu.Unlock()
	if bytes.Contains(body, []byte(`"fail":true`)) {
		w.WriteHeader(http.StatusUnprocessableEntity)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (g *markerGateway) received() [][]byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]byte(nil), g.bodies...)
}

func testMarkerInNoTable(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	marker := newMarker(t)
	ring := storetest.TestKeyring(t, 7)
	var events []outbox.Event
	for i := range 4 {
		e := storetest.PaymentEvent(fmt.Sprintf("enc-ok-%d", i), 1)
		e.Payload = []byte(fmt.Sprintf(`{"card":%q,"n":%d}`, marker, i))
		events = append(events, e)
	}
	for i := range 2 {
		e := storetest.PaymentEvent(fmt.Sprintf("enc-bad-%d", i), 1)
		e.Payload = []byte(fmt.Sprintf(`{"card":%q,"fail":true}`, marker))
		e.EncryptionSubject = "customer/" + marker[:12]
		events = append(events, e)
	}
	ids := storetest.EnqueueIn(t, h.Sealing(t, ring), events...)

	gw := &markerGateway{}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	sk, err := httpsink.New(httpsink.Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(h, sk, "enc-marker")
	cfg.Encryption = ring
	drain(t, newRelay(t, cfg), 60*time.Second)

	delivered := 0
	for _, b := range gw.received() {
		if !bytes.Contains(b, []byte(marker)) {
			t.Fatalf("the gateway received a body without the plaintext: %s", b)
		}
		if !bytes.Contains(b, []byte(`"fail":true`)) {
			delivered++
		}
	}
	if delivered != 4 {
		t.Fatalf("the gateway received %d plaintext deliveries; want 4", delivered)
	}
	for i, id := range ids {
		rec, err := h.Store.GetEvent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := outbox.StatusProcessed
		if i >= 4 {
			want = outbox.StatusFailed
		}
		if rec.Status != want {
			t.Fatalf("event %d is %s (%s); want %s", i, rec.Status, rec.LastError, want)
		}
	}
	dls, err := h.Store.DeadLetters(ctx, 100)
	if err != nil || len(dls) != 2 {
		t.Fatalf("dead letters = %d, %v; want 2", len(dls), err)
	}
	// The delivered events move into the history, as the sweeper moves
	// them once they are older than --retention.
	if n, err := h.Store.MoveToHistory(ctx, store.HistoryMoveRequest{}); err != nil || n != 4 {
		t.Fatalf("moved %d events into history, %v; want the 4 delivered", n, err)
	}

	// Every table of the outbox, read back as text by SQL.
	seen := map[string]int{}
	for _, table := range outboxTables(t, h) {
		rows, text := tableText(t, h, table)
		seen[strings.TrimPrefix(table, h.Table)] = rows
		if strings.Contains(text, marker) {
			t.Errorf("table %s holds the plaintext marker", table)
		}
	}
	for _, suffix := range []string{"", "_attempts", "_dead_letters", "_keys", "_history"} {
		if seen[suffix] == 0 {
			t.Errorf("table %s%s was not read or is empty (read: %v): the check must see every table's rows", h.Table, suffix, seen)
		}
	}
}

// outboxTables lists the tables of the outbox h.Table: itself and every
// table whose name is its name and a suffix.
func outboxTables(t *testing.T, h *storetest.Harness) []string {
	t.Helper()
	ctx := context.Background()
	var names []string
	for _, q := range []string{
		`SELECT name FROM sqlite_master WHERE type = 'table'`,
		`SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`,
		`SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()`,
	} {
		rows, err := h.SQL.QueryContext(ctx, q)
		if err != nil {
			continue
		}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == h.Table || strings.HasPrefix(n, h.Table+"_") {
				names = append(names, n)
			}
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		if len(names) > 0 {
			return names
		}
	}
	t.Fatalf("found no table of %s", h.Table)
	return nil
}

// tableText reads every row of table and returns how many there are and
// all their values as text.
func tableText(t *testing.T, h *storetest.Harness, table string) (int, string) {
	t.Helper()
	rows, err := h.SQL.QueryContext(context.Background(), "SELECT * FROM "+table)
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	n := 0
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		for _, v := range vals {
			if raw, ok := v.([]byte); ok {
				b.Write(raw)
			} else {
				fmt.Fprint(&b, v)
			}
			b.WriteByte('\t')
		}
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	return n, b.String()
}

// payloadSink records the payload of every message it receives, by event
// id. With a hold, its second call waits in Publish until hold is closed
// (entered is closed when it starts waiting).
type payloadSink struct {
	mu       sync.Mutex
	payloads map[outbox.EventID][]byte
	calls    int

	hold, entered chan struct{}
}

func (s *payloadSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	s.mu.Lock()
	s.calls++
	wait := s.hold != nil && s.calls == 2
	s.mu.Unlock()
	if wait {
		close(s.entered)
		select {
		case <-s.hold:
		case <-ctx.Done():
			errs := make([]error, len(msgs))
			for i := range errs {
				errs[i] = ctx.Err()
			}
			return errs
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.payloads == nil {
		s.payloads = map[outbox.EventID][]byte{}
	}
	for _, m := range msgs {
		s.payloads[m.EventID] = append([]byte(nil), m.Payload...)
	}
	return make([]error, len(msgs))
}

func (s *payloadSink) Close(context.Context) error { return nil }

func (s *payloadSink) get(id outbox.EventID) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.payloads[id]
	return p, ok
}

func (s *payloadSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.payloads)
}

func testRotationWhileDelivering(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	old := storetest.TestKeyring(t, 1)
	next := storetest.TestKeyring(t, 2)
	rotating, err := encrypt.NewKeyring(next.Current(), old.Current())
	if err != nil {
		t.Fatal(err)
	}
	const subjects, perSubject = 8, 3
	want := map[outbox.EventID]string{}
	enqueue := func(ring *encrypt.Keyring, round int) {
		var events []outbox.Event
		for s := range subjects {
			for n := range perSubject {
				e := storetest.PaymentEvent(fmt.Sprintf("rot-%d", s), round*perSubject+n)
				events = append(events, e)
			}
		}
		ids := storetest.EnqueueIn(t, h.Sealing(t, ring), events...)
		for i, id := range ids {
			want[id] = string(events[i].Payload)
		}
	}
	enqueue(old, 0) // every subject's key wrapped by the old key-encryption key

	// The relay delivers a first batch, then holds its second one in the
	// sink while the keys are rewrapped, and delivers the rest after.
	sk := &payloadSink{hold: make(chan struct{}), entered: make(chan struct{})}
	cfg := testConfig(h, sk, "enc-rotate")
	cfg.Encryption = rotating
	cfg.BatchSize = 4
	cfg.MaxBatchesInFlight = 1
	stop := runRelays(t, newRelay(t, cfg))
	select {
	case <-sk.entered:
	case <-time.After(60 * time.Second):
		t.Fatalf("the relay did not reach its second batch: %d delivered", sk.count())
	}
	if n := sk.count(); n == 0 || n > cfg.BatchSize {
		t.Fatalf("%d events delivered before the rotation; want the first batch (1 to %d)", n, cfg.BatchSize)
	}
	res, err := store.RotateDataKeys(ctx, h.Store, rotating, 3)
	if err != nil {
		t.Fatalf("rotate: %v", err)
	}
	if res.Rewrapped != subjects {
		t.Fatalf("rotation = %+v; want %d keys rewrapped", res, subjects)
	}
	enqueue(rotating, 1) // producers on the new key during the rollout
	close(sk.hold)
	waitFor(t, 60*time.Second, func() bool { return sk.count() == len(want) }, func() string {
		return fmt.Sprintf("%d of %d events delivered", sk.count(), len(want))
	})
	stop()

	for id, plain := range want {
		got, _ := sk.get(id)
		if string(got) != plain {
			t.Fatalf("event %s reached the sink as %s; want %s", id, got, plain)
		}
	}
	if n := storetest.CountStatus(t, h.Store, outbox.StatusProcessed); n != int64(len(want)) {
		t.Fatalf("%d events PROCESSED; want all %d", n, len(want))
	}
	// After the rotation the old key-encryption key can go: the new one
	// alone reads every key and every stored payload.
	newOnly, err := encrypt.NewKeyring(next.Current())
	if err != nil {
		t.Fatal(err)
	}
	for id, plain := range want {
		rec, err := h.Store.GetEvent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := newOnly.Open(ctx, h.Store, id.String(), rec.Payload)
		if err != nil || !bytes.Equal(compact(t, got), compact(t, []byte(plain))) {
			t.Fatalf("event %s with the new key alone = %s, %v", id, got, err)
		}
	}
	again, err := store.RotateDataKeys(ctx, h.Store, rotating, 3)
	if err != nil || again.Rewrapped != 0 || again.AlreadyCurrent != subjects {
		t.Fatalf("second rotation = %+v, %v; want nothing left to rewrap", again, err)
	}
}

func testShreddedSubject(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	ring := storetest.TestKeyring(t, 5)
	var events []outbox.Event
	for _, who := range []string{"x", "y"} {
		for n := range 2 {
			e := storetest.PaymentEvent("shred-"+who, n)
			e.EncryptionSubject = "customer/" + who
			events = append(events, e)
		}
	}
	ids := storetest.EnqueueIn(t, h.Sealing(t, ring), events...)
	n, err := h.Store.ShredDataKeys(ctx, store.Shred{Subject: "customer/x", Actor: "operator:test", Reason: "erasure request 77"})
	if err != nil || n != 1 {
		t.Fatalf("shred = %d, %v; want 1 key", n, err)
	}

	sk := &payloadSink{}
	cfg := testConfig(h, sk, "enc-shred")
	cfg.Encryption = ring
	drain(t, newRelay(t, cfg), 60*time.Second)

	for _, id := range ids[:2] {
		if _, sent := sk.get(id); sent {
			t.Fatalf("event %s of the shredded subject reached the sink", id)
		}
	}
	first, err := h.Store.GetEvent(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != outbox.StatusFailed || !strings.Contains(first.LastError, "shredded") ||
		!strings.Contains(first.LastError, "customer/x") || !strings.Contains(first.LastError, "erasure request 77") {
		t.Fatalf("first event of the shredded subject is %s (%q); want FAILED saying its key was shredded", first.Status, first.LastError)
	}
	dls, err := h.Store.DeadLetters(ctx, 10)
	if err != nil || len(dls) != 1 || dls[0].EventID != ids[0] || !strings.Contains(dls[0].Reason, "shredded") {
		t.Fatalf("dead letters = %+v, %v; want the first event of customer/x, saying why", dls, err)
	}
	for i, id := range ids[2:] {
		got, sent := sk.get(id)
		if !sent || !bytes.Equal(compact(t, got), compact(t, events[2+i].Payload)) {
			t.Fatalf("event %s of the other subject reached the sink as %s (sent %v)", id, got, sent)
		}
	}
	// The audit chain hashes what is stored, which shredding leaves as it
	// was: the trail (the FAILED attempt of the shredded subject, the
	// deliveries' audit) still verifies.
	chain := h.Store.AuditChain()
	defer chain.Close()
	r, err := audit.Verify(ctx, chain, h.Table, audit.Options{})
	if err != nil || !r.OK() || r.ByKind[store.ChainAttempt] == 0 {
		t.Fatalf("audit chain after the shredding: %+v, %v; want it to verify, with the FAILED attempt chained", r, err)
	}
}

func compact(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := jsonCompact(&buf, b); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return buf.Bytes()
}

// waitFor waits until cond holds, failing the test with what() after
// timeout.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s: %s", timeout, what())
		}
		<-tick.C
	}
}

func jsonCompact(dst *bytes.Buffer, src []byte) error { return json.Compact(dst, src) }
