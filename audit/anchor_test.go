package audit

import (
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
)

func TestAnchorSignsAndParses(t *testing.T) {
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	a := Anchor{Table: "payments", Seq: 42, Hash: strings.Repeat("ab", 32), At: time.Date(2026, 12, 7, 1, 2, 3, 4, time.UTC), KeyID: KeyID(pub)}
	a.Signature = sign(key, a)
	back, err := ParseAnchor(a.String())
	if err != nil {
		t.Fatal(err)
	}
	if !back.Verify(pub) {
		t.Fatalf("the parsed anchor %s does not verify", back)
	}
	for name, edit := range map[string]func(*Anchor){
		"seq":   func(a *Anchor) { a.Seq++ },
		"hash":  func(a *Anchor) { a.Hash = strings.Repeat("cd", 32) },
		"table": func(a *Anchor) { a.Table = "other" },
		"at":    func(a *Anchor) { a.At = a.At.Add(time.Second) },
	} {
		e := back
		edit(&e)
		if e.Verify(pub) {
			t.Errorf("an anchor with its %s edited still verifies", name)
		}
	}
	other, _, _ := ed25519.GenerateKey(nil)
	if back.Verify(other) {
		t.Error("the anchor verifies with another key")
	}
	for _, bad := range []string{"", "{}", `{"table":"t","seq":1}`, a.String() + "x", `{"table":"t","seq":1,"hash":"` + a.Hash + `","key_id":"k","signature":"s","extra":1}`} {
		if _, err := ParseAnchor(bad); !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("ParseAnchor(%q) = %v; want ErrInvalidConfig", bad, err)
		}
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	private, public, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key, err := ReadSigningKey(write("key", private))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ReadVerifyKey(write("key.pub", public))
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(key.Public()) {
		t.Fatal("the public key file does not hold the signing key's public key")
	}
	if fromPrivate, err := ReadVerifyKey(filepath.Join(dir, "key")); err != nil || !fromPrivate.Equal(pub) {
		t.Fatalf("ReadVerifyKey of the signing key file: %v", err)
	}
	secret := strings.TrimSpace(strings.TrimPrefix(private, privatePrefix))
	for name, text := range map[string]string{
		"empty":       "",
		"public":      public,
		"short":       privatePrefix + "AAAA",
		"not base64":  privatePrefix + "!!" + secret,
		"no prefix":   secret,
		"with secret": "ed25519-private-typo:" + secret,
	} {
		_, err := ReadSigningKey(write(name, text))
		if !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("%s: %v; want ErrInvalidConfig", name, err)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error quotes the key: %v", name, err)
		}
	}
	if _, err := ReadSigningKey(filepath.Join(dir, "missing")); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("missing file: %v", err)
	}
}

func sign(key ed25519.PrivateKey, a Anchor) string {
	return base64Std(ed25519.Sign(key, a.Message()))
}
