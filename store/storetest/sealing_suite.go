package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
)

// RunSealing checks the producer's side of payload encryption on the
// backend's writer: payloads sealed in the producer's transaction under
// their subject's key, the key made in that transaction, and what an
// encrypting writer refuses.
func RunSealing(t *testing.T, newHarness Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
	}{
		{"PayloadsSealedUnderTheirSubject", testSealUnderSubject},
		{"RollbackTakesTheNewKeyWithIt", testSealRollback},
		{"RefusesWhatItCannotSeal", testSealRefusals},
		{"ConcurrentProducersShareOneKey", testSealConcurrentProducers},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			if h.Sealing == nil {
				t.Fatal("the harness has no Sealing: every backend must encrypt payloads")
			}
			tc.fn(t, h)
		})
	}
}

// TestKeyring returns a keyring over a fixed key-encryption key of fill.
func TestKeyring(t testing.TB, fill byte, previous ...encrypt.KeyWrapper) *encrypt.Keyring {
	t.Helper()
	kek, err := encrypt.NewLocalKEK(bytes.Repeat([]byte{fill}, 32))
	if err != nil {
		t.Fatal(err)
	}
	ring, err := encrypt.NewKeyring(kek, previous...)
	if err != nil {
		t.Fatal(err)
	}
	return ring
}

func testSealUnderSubject(t *testing.T, h *Harness) {
	ctx := context.Background()
	ring := TestKeyring(t, 1)
	customer := PaymentEvent("p1", 2)
	customer.Payload = []byte(`{"pan":"MARKER-2"}`)
	customer.EncryptionSubject = "customer/7"
	first := PaymentEvent("p1", 1)
	first.Payload = []byte(`{"pan":"MARKER-1"}`)
	ids := EnqueueIn(t, h.Sealing(t, ring), first, customer)
	plain := Enqueue(t, h, PaymentEvent("p2", 1))[0]

	for i, want := range []struct{ subject, plain string }{{"payment/p1", `{"pan":"MARKER-1"}`}, {"customer/7", `{"pan":"MARKER-2"}`}} {
		rec, err := h.Store.GetEvent(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(rec.Payload, []byte("MARKER")) {
			t.Fatalf("event %d is stored in plain: %s", i, rec.Payload)
		}
		env, err := encrypt.ParseEnvelope(rec.Payload)
		if err != nil || env.Subject != want.subject || env.KeyVersion != 1 {
			t.Fatalf("event %d stored as %s (%v); want an envelope of subject %s, key version 1", i, rec.Payload, err, want.subject)
		}
		got, err := ring.Open(ctx, h.Store, ids[i].String(), rec.Payload)
		if err != nil || !jsonEqual(got, []byte(want.plain)) {
			t.Fatalf("event %d opens as %s, %v; want %s", i, got, err, want.plain)
		}
	}
	if rec, err := h.Store.GetEvent(ctx, plain); err != nil || encrypt.IsSealed(rec.Payload) {
		t.Fatalf("a writer without encryption sealed a payload: %s, %v", rec.Payload, err)
	}
	if _, ok, err := h.Store.LatestDataKey(ctx, "payment/p2"); err != nil || ok {
		t.Fatalf("a writer without encryption made a key: %v, %v", ok, err)
	}
}

// jsonEqual compares two JSON texts as the stored form may respace them.
func jsonEqual(a, b []byte) bool {
	var x, y bytes.Buffer
	return compactJSON(&x, a) == nil && compactJSON(&y, b) == nil && bytes.Equal(x.Bytes(), y.Bytes())
}

func testSealRollback(t *testing.T, h *Harness) {
	ctx := context.Background()
	tx, err := h.Sealing(t, TestKeyring(t, 1))(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Enqueue(ctx, PaymentEvent("gone", 1)); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := h.Store.LatestDataKey(ctx, "payment/gone"); err != nil || ok {
		t.Fatalf("a rolled-back enqueue left its subject's key: ok=%v err=%v", ok, err)
	}
}

func testSealRefusals(t *testing.T, h *Harness) {
	ctx := context.Background()
	ring := TestKeyring(t, 1)
	begin := h.Sealing(t, ring)
	withComp := PaymentEvent("c", 1)
	withComp.TTL = time.Hour
	withComp.OnExpired = &outbox.Compensation{EventType: "Expired", Payload: []byte(`{"pan":"MARKER"}`)}
	sealed, err := encrypt.Seal(bytes.Repeat([]byte{3}, 32), outbox.NewEventID().String(), "s", 1, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	twice := PaymentEvent("c", 2)
	twice.Payload = sealed
	badSubject := PaymentEvent("c", 3)
	badSubject.EncryptionSubject = "bad\x01subject"
	for _, e := range []outbox.Event{withComp, twice, badSubject} {
		tx, err := begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Enqueue(ctx, PaymentEvent("c", 0), e)
		_ = tx.Rollback(ctx)
		var inv *outbox.InvalidEventError
		if !errors.As(err, &inv) || inv.Index != 1 {
			t.Errorf("enqueue of %+v = %v; want an InvalidEventError for event #1", e, err)
		}
	}
	// A compensating event without a payload of its own is accepted.
	withComp.OnExpired.Payload = nil
	EnqueueIn(t, begin, withComp)
}

func testSealConcurrentProducers(t *testing.T, h *Harness) {
	ctx := context.Background()
	ring := TestKeyring(t, 1)
	begin := h.Sealing(t, ring)
	const producers = 4
	ids := make([]outbox.EventID, producers)
	errs := make([]error, producers)
	var wg sync.WaitGroup
	for i := range producers {
		wg.Go(func() {
			e := PaymentEvent("shared", i)
			e.EncryptionSubject = "merchant/1"
			for try := 0; try < 20; try++ {
				var got []outbox.EventID
				got, errs[i] = enqueueIn(ctx, begin, e)
				if errs[i] == nil {
					ids[i] = got[0]
					return
				}
				if h.Conflict == nil || !h.Conflict(errs[i]) {
					return
				}
			}
		})
	}
	wg.Wait()
	for i := range producers {
		if errs[i] != nil {
			t.Fatalf("producer %d: %v", i, errs[i])
		}
		rec, err := h.Store.GetEvent(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ring.Open(ctx, h.Store, ids[i].String(), rec.Payload); err != nil {
			t.Fatalf("producer %d's payload does not open with the stored key: %v", i, err)
		}
	}
	if k, ok, err := h.Store.LatestDataKey(ctx, "merchant/1"); err != nil || !ok || k.Version != 1 {
		t.Fatalf("latest key of merchant/1 = %+v, %v, %v; want the one version 1", k, ok, err)
	}
}

// enqueueIn enqueues e in a transaction of begin's, committed unless it
// fails.
func enqueueIn(ctx context.Context, begin func(context.Context) (Tx, error), e outbox.Event) ([]outbox.EventID, error) {
	tx, err := begin(ctx)
	if err != nil {
		return nil, err
	}
	ids, err := tx.Enqueue(ctx, e)
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return ids, tx.Commit(ctx)
}

func compactJSON(dst *bytes.Buffer, src []byte) error { return json.Compact(dst, src) }
