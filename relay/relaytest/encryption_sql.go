package relaytest

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/sink/httpsink"
	"github.com/txoutbox/outbox/store/storetest"
)

// testEnvelopeFromPlainSQL is a producer in another language: with the
// standard AES-GCM primitives alone it follows docs/ENCRYPTION.md to make
// a data key, wrap it, store it and seal a payload, and writes both rows
// with plain SQL. The relay opens it and the sink receives the plaintext.
func testEnvelopeFromPlainSQL(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	kekBytes := bytes.Repeat([]byte{0x5a}, 32)
	bind := bindOf(h)

	// The key-encryption key's id: "kek-" and the first 8 bytes, in hex,
	// of SHA-256("outbox-kek-id-v1\x00" + key).
	sum := sha256.Sum256(append([]byte("outbox-kek-id-v1\x00"), kekBytes...))
	kekID := "kek-" + hex.EncodeToString(sum[:8])

	// A data key, wrapped: nonce || AES-256-GCM(kek, nonce, key, "outbox-data-key-v1\x00" + kek id).
	dataKey := randomBytes(t, 32)
	wrapNonce := randomBytes(t, 12)
	wrapped := append(wrapNonce, gcm(t, kekBytes).Seal(nil, wrapNonce, dataKey, []byte("outbox-data-key-v1\x00"+kekID))...)
	const subject = "merchant/m-77"
	if _, err := h.SQL.ExecContext(ctx, bind("INSERT INTO "+h.Table+"_keys (subject, version, wrapped_key, kek_id, created_at_ms) VALUES (?, ?, ?, ?, ?)"),
		subject, 1, base64.StdEncoding.EncodeToString(wrapped), kekID, time.Now().UnixMilli()); err != nil {
		t.Fatalf("insert the data key: %v", err)
	}

	// The payload, sealed for the event id the producer chose.
	eventID := outbox.NewEventID().String()
	plain := []byte(`{"merchant":"m-77","iban":"DE89370400440532013000"}`)
	nonce := randomBytes(t, 12)
	ad := "outbox-payload-v1\x00" + eventID + "\x00" + subject + "\x00"
	envelope, err := json.Marshal(map[string]any{
		"outbox_encrypted": 1, "subject": subject, "key_version": 1,
		"nonce":      base64.StdEncoding.EncodeToString(nonce),
		"ciphertext": base64.StdEncoding.EncodeToString(gcm(t, dataKey).Seal(nil, nonce, plain, []byte(ad))),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.SQL.ExecContext(ctx, bind("INSERT INTO "+h.Table+" (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, ?, ?, ?, ?)"),
		eventID, "merchant", "m-77", "PayoutRequested", string(envelope)); err != nil {
		t.Fatalf("insert the event: %v", err)
	}

	kek, err := encrypt.NewLocalKEK(kekBytes)
	if err != nil {
		t.Fatal(err)
	}
	ring, err := encrypt.NewKeyring(kek)
	if err != nil {
		t.Fatal(err)
	}
	sk := &payloadSink{}
	cfg := testConfig(h, sk, "enc-sql")
	cfg.Encryption = ring
	drain(t, newRelay(t, cfg), 60*time.Second)
	id, err := outbox.ParseEventID(eventID)
	if err != nil {
		t.Fatal(err)
	}
	got, sent := sk.get(id)
	if !sent || !bytes.Equal(compact(t, got), compact(t, plain)) {
		rec, _ := h.Store.GetEvent(ctx, id)
		t.Fatalf("the sink received %s (sent %v); want the plaintext (event %s: %s)", got, sent, rec.Status, rec.LastError)
	}
}

// testRelayWithoutKeyGivesBack: a relay given no key-encryption key, or
// another one, never sends a sealed payload nor fails its event: it gives
// the event back PENDING, due 30 s later, no retry counted, and logs why;
// a relay that has the key then delivers it.
func testRelayWithoutKeyGivesBack(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	ring := storetest.TestKeyring(t, 3)
	id := storetest.EnqueueIn(t, h.Sealing(t, ring), storetest.PaymentEvent("nokey", 1))[0]
	for _, wrong := range []*encrypt.Keyring{nil, storetest.TestKeyring(t, 4)} {
		sk := &payloadSink{}
		var logs testenv.Buffer
		cfg := testConfig(h, sk, "enc-nokey")
		cfg.Encryption = wrong
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		stop := runRelays(t, newRelay(t, cfg))
		waitFor(t, 30*time.Second, func() bool {
			rec, err := h.Store.GetEvent(ctx, id)
			return err == nil && rec.Status == outbox.StatusPending && rec.AvailableAt.After(rec.CreatedAt.Add(10*time.Second))
		}, func() string { return "the event was never given back for later" })
		stop()
		rec, err := h.Store.GetEvent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if sk.count() != 0 || rec.RetryCount != 0 {
			t.Fatalf("with keyring %v: %d sent, %d retries counted; want none", wrong != nil, sk.count(), rec.RetryCount)
		}
		if !strings.Contains(logs.String(), "could not be opened") || !strings.Contains(logs.String(), id.String()) {
			t.Fatalf("with keyring %v the relay logged no reason naming the event:\n%s", wrong != nil, logs.String())
		}
		// Due now again, for the next relay.
		if _, err := h.SQL.ExecContext(ctx, bindOf(h)("UPDATE "+h.Table+" SET available_at = created_at WHERE event_id = ?"), id.String()); err != nil {
			t.Fatal(err)
		}
	}
	sk := &payloadSink{}
	cfg := testConfig(h, sk, "enc-withkey")
	cfg.Encryption = ring
	drain(t, newRelay(t, cfg), 60*time.Second)
	if got, sent := sk.get(id); !sent || !bytes.Equal(compact(t, got), compact(t, storetest.PaymentEvent("nokey", 1).Payload)) {
		t.Fatalf("the relay with the key sent %s (sent %v)", got, sent)
	}
}

// testPlainRowsSealedByTheRelay: rows a producer wrote in plain by SQL are
// sealed in place when a relay with encryption on claims them: the
// gateway receives the plaintext, and afterwards no table holds it, the
// dead letter of the one that failed included.
func testPlainRowsSealedByTheRelay(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	marker := newMarker(t)
	insert := bindOf(h)("INSERT INTO " + h.Table + " (aggregate_type, aggregate_id, event_type, payload) VALUES (?, ?, ?, ?)")
	for _, p := range []struct{ agg, payload string }{
		{"plain-ok", `{"card":"` + marker + `"}`},
		{"plain-bad", `{"card":"` + marker + `","fail":true}`},
	} {
		if _, err := h.SQL.ExecContext(ctx, insert, "payment", p.agg, "Approved", p.payload); err != nil {
			t.Fatal(err)
		}
	}
	gw := &markerGateway{}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	sk, err := httpsink.New(httpsink.Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(h, sk, "enc-plain")
	cfg.Encryption = storetest.TestKeyring(t, 6)
	drain(t, newRelay(t, cfg), 60*time.Second)
	got := gw.received()
	if len(got) != 2 || !bytes.Contains(got[0], []byte(marker)) || !bytes.Contains(got[1], []byte(marker)) {
		t.Fatalf("the gateway received %q; want both plaintexts", got)
	}
	if n := storetest.CountStatus(t, h.Store, outbox.StatusFailed); n != 1 {
		t.Fatalf("%d events FAILED; want the one the gateway refused", n)
	}
	for _, table := range outboxTables(t, h) {
		if _, text := tableText(t, h, table); strings.Contains(text, marker) {
			t.Errorf("table %s still holds the plaintext after the relay sealed the rows", table)
		}
	}
	for _, subject := range []string{"payment/plain-ok", "payment/plain-bad"} {
		if _, ok, err := h.Store.LatestDataKey(ctx, subject); err != nil || !ok {
			t.Errorf("no data key for %s: %v", subject, err)
		}
	}
}

func bindOf(h *storetest.Harness) func(string) string {
	if h.Bind == nil {
		return func(q string) string { return q }
	}
	return h.Bind
}

func gcm(t *testing.T, key []byte) cipher.AEAD {
	t.Helper()
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	return aead
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}
