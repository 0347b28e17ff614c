package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/store"
)

// RunDataKeys checks the data keys of store.Store (payload encryption):
// storing, reading, paging, rewrapping under a compare-and-set, and
// shredding with its audit, and that a keyring over the store seals and
// opens payloads until a subject is shredded.
func RunDataKeys(t *testing.T, newHarness Factory) {
	t.Run("SealPendingPlainPayloads", func(t *testing.T) {
		t.Parallel()
		testSealPending(t, newHarness(t))
	})
	tests := []struct {
		name string
		fn   func(*testing.T, store.Store)
	}{
		{"CreateAndRead", testKeyCreateAndRead},
		{"FirstCreateWins", testKeyFirstCreateWins},
		{"RewrapIsACompareAndSet", testKeyRewrap},
		{"ShredOneSubject", testKeyShred},
		{"PagesInOrder", testKeyPages},
		{"BadInputIsRefused", testKeyBadInput},
		{"KeyringOverTheStore", testKeyringOverStore},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			tc.fn(t, h.Store)
		})
	}
}

// wrappedKey returns 60 bytes that stand for a wrapped data key.
func wrappedKey(fill byte) []byte { return bytes.Repeat([]byte{fill}, 60) }

func mustCreateKey(t *testing.T, s store.Store, k encrypt.DataKey) encrypt.DataKey {
	t.Helper()
	got, err := s.CreateDataKey(context.Background(), k)
	if err != nil {
		t.Fatalf("create data key %s/%d: %v", k.Subject, k.Version, err)
	}
	return got
}

func mustKeyVersion(t *testing.T, s store.Store, subject string, version int) encrypt.DataKey {
	t.Helper()
	k, ok, err := s.DataKeyVersion(context.Background(), subject, version)
	if err != nil || !ok {
		t.Fatalf("data key %s/%d: ok=%v err=%v", subject, version, ok, err)
	}
	return k
}

func testKeyCreateAndRead(t *testing.T, s store.Store) {
	ctx := context.Background()
	before := time.Now().Add(-time.Minute)
	got := mustCreateKey(t, s, encrypt.DataKey{Subject: "merchant-é/1", Version: 1, Wrapped: wrappedKey(1), KEKID: "kek-a"})
	if got.Subject != "merchant-é/1" || got.Version != 1 || !bytes.Equal(got.Wrapped, wrappedKey(1)) || got.KEKID != "kek-a" || got.Shredded() {
		t.Fatalf("created key = %+v", got)
	}
	if got.CreatedAt.Before(before) || got.CreatedAt.After(time.Now().Add(time.Minute)) {
		t.Fatalf("created at %s; want the database clock, near now", got.CreatedAt)
	}
	mustCreateKey(t, s, encrypt.DataKey{Subject: "merchant-é/1", Version: 2, Wrapped: wrappedKey(2), KEKID: "kek-a"})
	latest, ok, err := s.LatestDataKey(ctx, "merchant-é/1")
	if err != nil || !ok || latest.Version != 2 || !bytes.Equal(latest.Wrapped, wrappedKey(2)) {
		t.Fatalf("latest = %+v, %v, %v; want version 2", latest, ok, err)
	}
	if k := mustKeyVersion(t, s, "merchant-é/1", 1); !bytes.Equal(k.Wrapped, wrappedKey(1)) {
		t.Fatalf("version 1 = %+v", k)
	}
	// Subjects are compared byte for byte: another case is another subject.
	for _, other := range []string{"MERCHANT-é/1", "merchant-e/1", "merchant-é/1 "} {
		if _, ok, err := s.LatestDataKey(ctx, other); err != nil || ok {
			t.Errorf("latest of %q = ok %v, %v; want none", other, ok, err)
		}
	}
	if _, ok, err := s.DataKeyVersion(ctx, "merchant-é/1", 3); err != nil || ok {
		t.Fatalf("version 3 = ok %v, %v; want none", ok, err)
	}
}

func testKeyFirstCreateWins(t *testing.T, s store.Store) {
	const writers = 6
	var wg sync.WaitGroup
	got := make([]encrypt.DataKey, writers)
	errs := make([]error, writers)
	for i := range writers {
		wg.Go(func() {
			got[i], errs[i] = s.CreateDataKey(context.Background(),
				encrypt.DataKey{Subject: "customer-1", Version: 1, Wrapped: wrappedKey(byte(i + 1)), KEKID: "kek-a"})
		})
	}
	wg.Wait()
	stored := mustKeyVersion(t, s, "customer-1", 1)
	for i := range writers {
		if errs[i] != nil {
			t.Fatalf("writer %d: %v", i, errs[i])
		}
		if !bytes.Equal(got[i].Wrapped, stored.Wrapped) {
			t.Fatalf("writer %d got a key other than the stored one: every writer must use the one that won", i)
		}
	}
}

func testKeyRewrap(t *testing.T, s store.Store) {
	ctx := context.Background()
	k := mustCreateKey(t, s, encrypt.DataKey{Subject: "payment/7", Version: 1, Wrapped: wrappedKey(1), KEKID: "kek-old"})
	k.Wrapped, k.KEKID = wrappedKey(9), "kek-new"
	if ok, err := s.RewrapDataKey(ctx, k, "kek-old"); err != nil || !ok {
		t.Fatalf("rewrap from kek-old = %v, %v; want applied", ok, err)
	}
	if got := mustKeyVersion(t, s, "payment/7", 1); got.KEKID != "kek-new" || !bytes.Equal(got.Wrapped, wrappedKey(9)) {
		t.Fatalf("after rewrap = %+v", got)
	}
	// A second rotation that read the old wrapping changes nothing.
	k.Wrapped, k.KEKID = wrappedKey(5), "kek-other"
	if ok, err := s.RewrapDataKey(ctx, k, "kek-old"); err != nil || ok {
		t.Fatalf("stale rewrap = %v, %v; want not applied", ok, err)
	}
	if got := mustKeyVersion(t, s, "payment/7", 1); got.KEKID != "kek-new" {
		t.Fatalf("a stale rewrap changed the key: %+v", got)
	}
	k.Subject = "payment/none"
	if ok, err := s.RewrapDataKey(ctx, k, "kek-new"); err != nil || ok {
		t.Fatalf("rewrap of a missing key = %v, %v", ok, err)
	}
}

func testKeyShred(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustCreateKey(t, s, encrypt.DataKey{Subject: "customer-9", Version: 1, Wrapped: wrappedKey(1), KEKID: "kek-a"})
	mustCreateKey(t, s, encrypt.DataKey{Subject: "customer-9", Version: 2, Wrapped: wrappedKey(2), KEKID: "kek-a"})
	mustCreateKey(t, s, encrypt.DataKey{Subject: "customer-10", Version: 1, Wrapped: wrappedKey(3), KEKID: "kek-a"})
	n, err := s.ShredDataKeys(ctx, store.Shred{Subject: "customer-9", Actor: "operator:ana", Reason: "erasure request #123"})
	if err != nil || n != 2 {
		t.Fatalf("shred = %d, %v; want 2 versions", n, err)
	}
	for v := 1; v <= 2; v++ {
		k := mustKeyVersion(t, s, "customer-9", v)
		if !k.Shredded() || k.Wrapped != nil || k.ShreddedBy != "operator:ana" || k.ShredReason != "erasure request #123" {
			t.Fatalf("version %d after shred = %+v; want no wrapped bytes and the audit", v, k)
		}
	}
	if k := mustKeyVersion(t, s, "customer-10", 1); k.Shredded() || !bytes.Equal(k.Wrapped, wrappedKey(3)) {
		t.Fatalf("another subject was touched: %+v", k)
	}
	if n, err := s.ShredDataKeys(ctx, store.Shred{Subject: "customer-9", Actor: "operator:ana", Reason: "again"}); err != nil || n != 0 {
		t.Fatalf("second shred = %d, %v; want 0", n, err)
	}
	if k := mustKeyVersion(t, s, "customer-9", 1); k.ShredReason != "erasure request #123" {
		t.Fatalf("a second shred overwrote the audit: %+v", k)
	}
	k := mustKeyVersion(t, s, "customer-9", 1)
	k.Wrapped, k.KEKID = wrappedKey(7), "kek-b"
	if ok, err := s.RewrapDataKey(ctx, k, "kek-a"); err != nil || ok {
		t.Fatalf("rewrap of a shredded key = %v, %v; want refused", ok, err)
	}
	if got := mustKeyVersion(t, s, "customer-9", 1); got.Wrapped != nil {
		t.Fatal("a rewrap brought a shredded key back")
	}
}

func testKeyPages(t *testing.T, s store.Store) {
	ctx := context.Background()
	var want []string
	for _, subj := range []string{"b", "a", "c"} {
		for v := 1; v <= 2; v++ {
			mustCreateKey(t, s, encrypt.DataKey{Subject: subj, Version: v, Wrapped: wrappedKey(byte(v)), KEKID: "kek-a"})
		}
	}
	for _, subj := range []string{"a", "b", "c"} {
		want = append(want, subj+"/1", subj+"/2")
	}
	var got []string
	var after store.DataKeyCursor
	for pages := 0; ; pages++ {
		page, err := s.DataKeys(ctx, after, 4)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 || pages > 5 {
			break
		}
		for _, k := range page {
			got = append(got, fmt.Sprintf("%s/%d", k.Subject, k.Version))
		}
		after = store.After(page[len(page)-1])
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pages = %v; want %v", got, want)
	}
}

func testKeyBadInput(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, k := range []encrypt.DataKey{
		{Subject: "", Version: 1, Wrapped: wrappedKey(1), KEKID: "k"},
		{Subject: "s", Version: 0, Wrapped: wrappedKey(1), KEKID: "k"},
		{Subject: "s", Version: 1, KEKID: "k"},
		{Subject: "s", Version: 1, Wrapped: wrappedKey(1)},
		{Subject: string(bytes.Repeat([]byte("x"), 257)), Version: 1, Wrapped: wrappedKey(1), KEKID: "k"},
		{Subject: "bad\nsubject", Version: 1, Wrapped: wrappedKey(1), KEKID: "k"},
	} {
		if _, err := s.CreateDataKey(ctx, k); !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("create %q v%d: %v; want ErrInvalidConfig", k.Subject, k.Version, err)
		}
	}
	for _, sh := range []store.Shred{
		{Subject: "s", Actor: "operator:a"},
		{Subject: "s", Reason: "r"},
		{Subject: "", Actor: "a", Reason: "r"},
	} {
		if _, err := s.ShredDataKeys(ctx, sh); !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("shred %+v: %v; want ErrInvalidConfig", sh, err)
		}
	}
}

func testKeyringOverStore(t *testing.T, s store.Store) {
	ctx := context.Background()
	kek, err := encrypt.NewLocalKEK(bytes.Repeat([]byte{42}, 32))
	if err != nil {
		t.Fatal(err)
	}
	ring, err := encrypt.NewKeyring(kek)
	if err != nil {
		t.Fatal(err)
	}
	a, b := outbox.NewEventID().String(), outbox.NewEventID().String()
	sealedA, err := ring.Seal(ctx, s, a, "customer-1", []byte(`{"pan":"MARKER-A"}`))
	if err != nil {
		t.Fatal(err)
	}
	sealedB, err := ring.Seal(ctx, s, b, "customer-2", []byte(`{"pan":"MARKER-B"}`))
	if err != nil {
		t.Fatal(err)
	}
	if k := mustKeyVersion(t, s, "customer-1", 1); k.KEKID != kek.KeyID() || bytes.Contains(k.Wrapped, []byte("MARKER")) {
		t.Fatalf("stored key = %+v", k)
	}
	if pt, err := ring.Open(ctx, s, a, sealedA); err != nil || string(pt) != `{"pan":"MARKER-A"}` {
		t.Fatalf("open = %s, %v", pt, err)
	}
	if _, err := s.ShredDataKeys(ctx, store.Shred{Subject: "customer-1", Actor: "test", Reason: "erasure"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ring.Open(ctx, s, a, sealedA); !errors.Is(err, encrypt.ErrShredded) {
		t.Fatalf("open after shred = %v; want ErrShredded", err)
	}
	if pt, err := ring.Open(ctx, s, b, sealedB); err != nil || string(pt) != `{"pan":"MARKER-B"}` {
		t.Fatalf("the other subject after the shred = %s, %v", pt, err)
	}
}

func testSealPending(t *testing.T, h *Harness) {
	ctx := context.Background()
	ids := Enqueue(t, h, PaymentEvent("plain", 1), PaymentEvent("done", 1))
	claim, err := h.Store.Claim(ctx, store.ClaimRequest{RelayID: "sealer", Limit: 10, Lease: time.Minute})
	if err != nil || len(claim.Events) != 2 {
		t.Fatalf("claim = %+v, %v; want the two events", claim, err)
	}
	rows := map[outbox.EventID]int64{}
	for _, e := range claim.Events {
		rows[e.EventID] = e.ID
	}
	// The second one is delivered first: a finished row is never changed.
	if _, err := h.Store.Complete(ctx, store.CompleteRequest{Token: claim.Token, RelayID: "sealer", Outcomes: []store.Outcome{
		{ID: rows[ids[1]], EventID: ids[1], Kind: store.Delivered, Attempt: 1, Attempted: true}}}); err != nil {
		t.Fatal(err)
	}
	seal := func(id outbox.EventID, aggregate string) []byte {
		b, err := encrypt.Seal(bytes.Repeat([]byte{1}, 32), id.String(), "payment/"+aggregate, 1, PaymentEvent(aggregate, 1).Payload)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if _, err := h.Store.SealPending(ctx, []store.SealedPayload{{ID: rows[ids[0]], EventID: ids[0], Payload: []byte(`{"plain":1}`)}}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Fatalf("seal with a payload that is no envelope = %v; want ErrInvalidConfig", err)
	}
	n, err := h.Store.SealPending(ctx, []store.SealedPayload{
		{ID: rows[ids[0]], EventID: ids[1], Payload: seal(ids[0], "plain")}, // another event's id: no row
		{ID: rows[ids[1]], EventID: ids[1], Payload: seal(ids[1], "done")},  // PROCESSED: left alone
	})
	if err != nil || n != 0 {
		t.Fatalf("seal of rows that do not match = %d, %v; want nothing changed", n, err)
	}
	for _, id := range ids {
		if rec, _ := h.Store.GetEvent(ctx, id); encrypt.IsSealed(rec.Payload) {
			t.Fatalf("event %s was sealed by a seal that should change nothing", id)
		}
	}
	if n, err := h.Store.SealPending(ctx, []store.SealedPayload{{ID: rows[ids[0]], EventID: ids[0], Payload: seal(ids[0], "plain")}}); err != nil || n != 1 {
		t.Fatalf("seal of the pending row = %d, %v; want 1 row", n, err)
	}
	rec, err := h.Store.GetEvent(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if env, err := encrypt.ParseEnvelope(rec.Payload); err != nil || env.Subject != "payment/plain" {
		t.Fatalf("payload after the seal = %s, %v; want the envelope", rec.Payload, err)
	}
}
