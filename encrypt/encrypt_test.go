package encrypt_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox/encrypt"
)

// memKeys is a KeyStore in memory.
type memKeys struct {
	mu   sync.Mutex
	keys map[string]encrypt.DataKey
}

func newMemKeys() *memKeys { return &memKeys{keys: map[string]encrypt.DataKey{}} }

func id(subject string, v int) string { return fmt.Sprintf("%s\x00%d", subject, v) }

func (m *memKeys) CreateDataKey(_ context.Context, k encrypt.DataKey) (encrypt.DataKey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.keys[id(k.Subject, k.Version)]; ok {
		return old, nil
	}
	k.CreatedAt = time.Now()
	m.keys[id(k.Subject, k.Version)] = k
	return k, nil
}

func (m *memKeys) LatestDataKey(_ context.Context, subject string) (encrypt.DataKey, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var best encrypt.DataKey
	for _, k := range m.keys {
		if k.Subject == subject && k.Version > best.Version {
			best = k
		}
	}
	return best, best.Version > 0, nil
}

func (m *memKeys) DataKeyVersion(_ context.Context, subject string, v int) (encrypt.DataKey, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.keys[id(subject, v)]
	return k, ok, nil
}

func (m *memKeys) shred(subject string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, k := range m.keys {
		if k.Subject == subject {
			k.Wrapped, k.ShreddedAt, k.ShredReason = nil, time.Now(), "erasure request"
			m.keys[key] = k
		}
	}
}

func kek(t *testing.T, fill byte) *encrypt.LocalKEK {
	t.Helper()
	k, err := encrypt.NewLocalKEK(bytes.Repeat([]byte{fill}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const eventA = "0190f5e4-8a7b-7c3d-9e1f-000000000001"
const eventB = "0190f5e4-8a7b-7c3d-9e1f-000000000002"

func TestSealHidesThePayloadAndOpensIt(t *testing.T) {
	ctx := context.Background()
	ring, err := encrypt.NewKeyring(kek(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	ks := newMemKeys()
	plain := []byte(`{"card":"MARKER-4111111111111111"}`)
	sealed, err := ring.Seal(ctx, ks, eventA, "payment/42", plain)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("MARKER")) {
		t.Fatalf("sealed payload shows the plaintext: %s", sealed)
	}
	e, err := encrypt.ParseEnvelope(sealed)
	if err != nil || e.Subject != "payment/42" || e.KeyVersion != 1 || e.Format != 1 {
		t.Fatalf("envelope = %+v, %v; want subject payment/42, version 1, format 1", e, err)
	}
	got, err := ring.Open(ctx, ks, eventA, sealed)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("open = %s, %v; want %s", got, err, plain)
	}
	// The subject's key is made once: a second event uses the same version.
	again, err := ring.Seal(ctx, ks, eventB, "payment/42", plain)
	if err != nil {
		t.Fatal(err)
	}
	if e2, _ := encrypt.ParseEnvelope(again); e2.KeyVersion != 1 || len(ks.keys) != 1 {
		t.Fatalf("second seal made version %d and %d keys; want the one key", e2.KeyVersion, len(ks.keys))
	}
	// A plain payload opens as it is.
	if got, err := ring.Open(ctx, ks, eventA, []byte(`{"a":1}`)); err != nil || string(got) != `{"a":1}` {
		t.Fatalf("open of a plain payload = %s, %v", got, err)
	}
}

func TestSealedPayloadCannotMoveToAnotherEventOrSubject(t *testing.T) {
	ctx := context.Background()
	ring, _ := encrypt.NewKeyring(kek(t, 1))
	ks := newMemKeys()
	sealed, err := ring.Seal(ctx, ks, eventA, "payment/42", []byte(`{"x":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ring.Open(ctx, ks, eventB, sealed); err == nil {
		t.Fatal("a payload sealed for event A opened as event B's")
	}
	// Same key under another subject name: the subject is authenticated.
	if _, err := ring.Seal(ctx, ks, eventB, "payment/43", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	k42, _, _ := ks.DataKeyVersion(ctx, "payment/42", 1)
	ks.keys[id("payment/43", 1)] = encrypt.DataKey{Subject: "payment/43", Version: 1, Wrapped: k42.Wrapped, KEKID: k42.KEKID}
	moved := bytes.Replace(sealed, []byte(`"payment/42"`), []byte(`"payment/43"`), 1)
	if _, err := ring.Open(ctx, ks, eventA, moved); err == nil {
		t.Fatal("a payload whose subject was rewritten opened")
	}
	e, _ := encrypt.ParseEnvelope(sealed)
	e.Ciphertext[0] ^= 1
	if _, err := ring.Open(ctx, ks, eventA, e.Marshal()); err == nil {
		t.Fatal("a changed ciphertext opened")
	}
}

func TestEnvelopeFormatIsWhatTheDocsSay(t *testing.T) {
	// What a producer in another language writes (docs/ENCRYPTION.md).
	dk := bytes.Repeat([]byte{7}, 32)
	sealed, err := encrypt.Seal(dk, eventA, "merchant-9", 3, []byte(`{"n":1}`))
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(sealed, &fields); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"outbox_encrypted", "subject", "key_version", "nonce", "ciphertext"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("envelope %s has no %q", sealed, k)
		}
	}
	nonce, err := base64.StdEncoding.DecodeString(fields["nonce"].(string))
	if err != nil || len(nonce) != 12 {
		t.Fatalf("nonce %v is not 12 bytes of standard base64: %v", fields["nonce"], err)
	}
	// Decrypt by hand with the documented additional data.
	e, _ := encrypt.ParseEnvelope(sealed)
	want := "outbox-payload-v1\x00" + eventA + "\x00merchant-9\x00"
	if string(encrypt.AdditionalData(eventA, "merchant-9")) != want {
		t.Fatalf("additional data = %q, want %q", encrypt.AdditionalData(eventA, "merchant-9"), want)
	}
	if got, err := encrypt.Open(dk, eventA, e); err != nil || string(got) != `{"n":1}` {
		t.Fatalf("open = %s, %v", got, err)
	}
	for _, bad := range []string{
		`{"outbox_encrypted":2,"subject":"s","key_version":1,"nonce":"AAAAAAAAAAAAAAAA","ciphertext":"AAAAAAAAAAAAAAAAAAAAAA=="}`,
		`{"outbox_encrypted":1,"subject":"","key_version":1,"nonce":"AAAAAAAAAAAAAAAA","ciphertext":"AAAAAAAAAAAAAAAAAAAAAA=="}`,
		`{"outbox_encrypted":1,"subject":"s","key_version":0,"nonce":"AAAAAAAAAAAAAAAA","ciphertext":"AAAAAAAAAAAAAAAAAAAAAA=="}`,
		`{"outbox_encrypted":1,"subject":"s","key_version":1,"nonce":"AAAA","ciphertext":"AAAAAAAAAAAAAAAAAAAAAA=="}`,
	} {
		if _, err := encrypt.ParseEnvelope([]byte(bad)); err == nil || errors.Is(err, encrypt.ErrNotSealed) {
			t.Errorf("ParseEnvelope(%s) = %v; want an error naming what is wrong", bad, err)
		}
	}
	for _, plain := range []string{`{"a":1}`, `[1,2]`, `"outbox_encrypted"`, `{"note":"outbox_encrypted"}`} {
		if _, err := encrypt.ParseEnvelope([]byte(plain)); !errors.Is(err, encrypt.ErrNotSealed) {
			t.Errorf("ParseEnvelope(%s) = %v; want ErrNotSealed", plain, err)
		}
	}
}

func TestRotationRewrapsAndKeepsPayloadsReadable(t *testing.T) {
	ctx := context.Background()
	old, next := kek(t, 1), kek(t, 2)
	if old.KeyID() == next.KeyID() || !strings.HasPrefix(old.KeyID(), "kek-") {
		t.Fatalf("key ids %q and %q do not tell the keys apart", old.KeyID(), next.KeyID())
	}
	ring, _ := encrypt.NewKeyring(old)
	ks := newMemKeys()
	sealed, err := ring.Seal(ctx, ks, eventA, "customer-1", []byte(`{"v":1}`))
	if err != nil {
		t.Fatal(err)
	}
	rotating, _ := encrypt.NewKeyring(next, old)
	k, _, _ := ks.DataKeyVersion(ctx, "customer-1", 1)
	rewrapped, err := rotating.Rewrap(ctx, k)
	if err != nil || rewrapped.KEKID != next.KeyID() || bytes.Equal(rewrapped.Wrapped, k.Wrapped) {
		t.Fatalf("rewrap = %+v, %v; want wrapped by %s", rewrapped, err, next.KeyID())
	}
	// Before it is stored, the rotating keyring still opens with the old KEK.
	if got, err := rotating.Open(ctx, ks, eventA, sealed); err != nil || string(got) != `{"v":1}` {
		t.Fatalf("open during rotation = %s, %v", got, err)
	}
	ks.keys[id("customer-1", 1)] = rewrapped
	newOnly, _ := encrypt.NewKeyring(next)
	if got, err := newOnly.Open(ctx, ks, eventA, sealed); err != nil || string(got) != `{"v":1}` {
		t.Fatalf("open with the new KEK alone = %s, %v", got, err)
	}
	oldOnly, _ := encrypt.NewKeyring(old)
	if _, err := oldOnly.Open(ctx, ks, eventA, sealed); !errors.Is(err, encrypt.ErrUnknownKEK) || !strings.Contains(err.Error(), next.KeyID()) {
		t.Fatalf("open with the retired KEK = %v; want ErrUnknownKEK naming %s", err, next.KeyID())
	}
}

func TestShreddedKeyMakesPayloadsUnreadable(t *testing.T) {
	ctx := context.Background()
	ring, _ := encrypt.NewKeyring(kek(t, 1))
	ks := newMemKeys()
	gone, _ := ring.Seal(ctx, ks, eventA, "customer-1", []byte(`{"v":1}`))
	kept, _ := ring.Seal(ctx, ks, eventB, "customer-2", []byte(`{"v":2}`))
	ks.shred("customer-1")
	_, err := ring.Open(ctx, ks, eventA, gone)
	var se *encrypt.ShreddedError
	if !errors.As(err, &se) || !errors.Is(err, encrypt.ErrShredded) || se.Subject != "customer-1" || !strings.Contains(err.Error(), "erasure request") {
		t.Fatalf("open after shredding = %v; want a ShreddedError for customer-1 with its reason", err)
	}
	if got, err := ring.Open(ctx, ks, eventB, kept); err != nil || string(got) != `{"v":2}` {
		t.Fatalf("another subject after shredding = %s, %v", got, err)
	}
	// A later event of the shredded subject gets a new key version.
	later, err := ring.Seal(ctx, ks, eventB, "customer-1", []byte(`{"v":3}`))
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := encrypt.ParseEnvelope(later); e.KeyVersion != 2 {
		t.Fatalf("seal after shredding used version %d; want 2", e.KeyVersion)
	}
	if _, err := ring.Open(ctx, ks, eventA, gone); !errors.Is(err, encrypt.ErrShredded) {
		t.Fatalf("the old payload opened after a new key version: %v", err)
	}
}

func TestKeyTextFormsAndErrorsThatNeverShowTheKey(t *testing.T) {
	raw := bytes.Repeat([]byte{0xab}, 32)
	for name, text := range map[string]string{
		"hex":         hex.EncodeToString(raw) + "\n",
		"base64":      base64.StdEncoding.EncodeToString(raw),
		"base64 raw":  base64.RawStdEncoding.EncodeToString(raw),
		"base64 url":  base64.URLEncoding.EncodeToString(raw),
		"with spaces": "  " + base64.StdEncoding.EncodeToString(raw) + "\r\n",
	} {
		k, err := encrypt.KeyFromText(text)
		if err != nil || !bytes.Equal(k, raw) {
			t.Errorf("%s: KeyFromText = %x, %v", name, k, err)
		}
	}
	secret16 := base64.StdEncoding.EncodeToString([]byte("SECRET-16-BYTES!"))
	dir := t.TempDir()
	path := filepath.Join(dir, "kek")
	if err := os.WriteFile(path, []byte(secret16), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := encrypt.KEKFromFile(path)
	if err == nil || !strings.Contains(err.Error(), "16 bytes") || !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), secret16) {
		t.Fatalf("KEKFromFile with a 16-byte key = %v; want the length and the path, never the key", err)
	}
	t.Setenv("OUTBOX_TEST_KEK", "not-a-key-SECRET")
	_, err = encrypt.KEKFromEnv("OUTBOX_TEST_KEK")
	if err == nil || !strings.Contains(err.Error(), "OUTBOX_TEST_KEK") || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("KEKFromEnv with a bad value = %v; want the variable's name, never its value", err)
	}
	if _, err := encrypt.KEKFromEnv("OUTBOX_TEST_KEK_UNSET_" + t.Name()); err == nil || !strings.Contains(err.Error(), "not set") {
		t.Fatalf("KEKFromEnv of an unset variable = %v", err)
	}
	good := hex.EncodeToString(raw)
	t.Setenv("OUTBOX_TEST_KEK", good)
	k, err := encrypt.KEKFromEnv("OUTBOX_TEST_KEK")
	if err != nil {
		t.Fatal(err)
	}
	for _, shown := range []string{fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s", k, k, k, k)} {
		if strings.Contains(shown, good) || strings.Contains(strings.ToLower(shown), "abab") {
			t.Fatalf("printing the KEK shows the key: %s", shown)
		}
	}
}

func TestConcurrentFirstSealsAgreeOnOneKey(t *testing.T) {
	ctx := context.Background()
	ring, _ := encrypt.NewKeyring(kek(t, 1))
	ks := newMemKeys()
	var wg sync.WaitGroup
	sealed := make([][]byte, 8)
	errs := make([]error, 8)
	for i := range sealed {
		wg.Go(func() { sealed[i], errs[i] = ring.Seal(ctx, ks, eventA, "merchant-7", []byte(`{}`)) })
	}
	wg.Wait()
	for i := range sealed {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if _, err := ring.Open(ctx, ks, eventA, sealed[i]); err != nil {
			t.Fatalf("seal %d does not open with the stored key: %v", i, err)
		}
	}
}

func TestBatchReadsEachKeyOnceAndSaysWhatCannotBeRead(t *testing.T) {
	ctx := context.Background()
	ring, _ := encrypt.NewKeyring(kek(t, 1))
	ks := &countingKeys{memKeys: newMemKeys()}
	b := ring.Batch(ks)
	var sealed [][]byte
	for i := range 5 {
		s, err := b.Seal(ctx, fmt.Sprintf("0190f5e4-8a7b-7c3d-9e1f-00000000000%d", i), "merchant/1", []byte(`{"i":1}`))
		if err != nil {
			t.Fatal(err)
		}
		sealed = append(sealed, s)
	}
	open := ring.Batch(ks)
	for i, s := range sealed {
		if _, err := open.Open(ctx, fmt.Sprintf("0190f5e4-8a7b-7c3d-9e1f-00000000000%d", i), s); err != nil {
			t.Fatal(err)
		}
	}
	if ks.latest != 1 || ks.version != 1 {
		t.Fatalf("a batch of 5 read the latest key %d times and a version %d times; want once each", ks.latest, ks.version)
	}
	if _, err := open.Open(ctx, eventB, sealed[0]); !errors.Is(err, encrypt.ErrUnreadable) {
		t.Fatalf("a payload moved to another event = %v; want ErrUnreadable", err)
	}
	e, _ := encrypt.ParseEnvelope(sealed[0])
	e.KeyVersion = 9
	if _, err := open.Open(ctx, eventA, e.Marshal()); !errors.Is(err, encrypt.ErrUnreadable) || !strings.Contains(err.Error(), "version 9") {
		t.Fatalf("a payload of a key version the store lacks = %v; want ErrUnreadable naming the version", err)
	}
	for _, bad := range []string{"", "bad\x01subject", strings.Repeat("é", encrypt.MaxSubjectLen+1), "\xff"} {
		if _, err := ring.Seal(ctx, ks, eventA, bad, []byte(`{}`)); err == nil {
			t.Errorf("seal under subject %q succeeded; want an error", bad)
		}
	}
}

type countingKeys struct {
	*memKeys
	latest, version int
}

func (c *countingKeys) LatestDataKey(ctx context.Context, s string) (encrypt.DataKey, bool, error) {
	c.latest++
	return c.memKeys.LatestDataKey(ctx, s)
}

func (c *countingKeys) DataKeyVersion(ctx context.Context, s string, v int) (encrypt.DataKey, bool, error) {
	c.version++
	return c.memKeys.DataKeyVersion(ctx, s, v)
}
