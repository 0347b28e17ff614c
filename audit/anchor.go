package audit

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// An Anchor is the chain's head at one moment, signed with an Ed25519 key
// that the operator holds outside the database. A copy kept outside the
// database (the relay logs each one) lets a verifier see that links were
// deleted from the chain's tail, which the chain alone cannot show.
type Anchor struct {
	Table string    `json:"table"`
	Seq   int64     `json:"seq"`
	Hash  string    `json:"hash"`
	At    time.Time `json:"at"`
	// KeyID names the signing key: the first 8 bytes of the SHA-256 of
	// its public key, in hex.
	KeyID string `json:"key_id"`
	// Signature is the Ed25519 signature of Message, in standard base64.
	Signature string `json:"signature"`
}

// Message is the text an anchor's signature covers.
func (a Anchor) Message() []byte {
	return []byte("outbox audit anchor v1\ntable=" + a.Table + "\nseq=" + strconv.FormatInt(a.Seq, 10) +
		"\nhash=" + a.Hash + "\nat=" + a.At.UTC().Format(time.RFC3339Nano))
}

// String is the anchor as one line of JSON, the form ParseAnchor reads.
func (a Anchor) String() string {
	b, _ := json.Marshal(a)
	return string(b)
}

// ParseAnchor reads an anchor printed by String.
func ParseAnchor(s string) (Anchor, error) {
	var a Anchor
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	err := dec.Decode(&a)
	if _, end := dec.Token(); err == nil && end != io.EOF {
		err = fmt.Errorf("text after the JSON object")
	}
	if err != nil {
		return a, fmt.Errorf("%w: an anchor is one line of JSON as `outbox audit anchor` prints it: %v", outbox.ErrInvalidConfig, err)
	}
	if a.Table == "" || a.Seq < 0 || len(a.Hash) != 64 || a.KeyID == "" || a.Signature == "" {
		return a, fmt.Errorf("%w: the anchor lacks its table, seq, hash, key_id or signature", outbox.ErrInvalidConfig)
	}
	return a, nil
}

// KeyID returns the id of a public key.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// Verify checks the anchor's signature with pub.
func (a Anchor) Verify(pub ed25519.PublicKey) bool {
	sig, err := base64.StdEncoding.DecodeString(a.Signature)
	return err == nil && a.KeyID == KeyID(pub) && ed25519.Verify(pub, a.Message(), sig)
}

// NewAnchor signs the chain's head and writes the anchor into the audit
// log (where it is chained too). actor names who anchors: "relay:<id>" or
// "operator:<name>".
func NewAnchor(ctx context.Context, c store.AuditChain, table string, key ed25519.PrivateKey, actor string) (Anchor, error) {
	head, err := c.Head(ctx)
	if err != nil {
		return Anchor{}, err
	}
	pub := key.Public().(ed25519.PublicKey)
	a := Anchor{Table: table, Seq: head.Seq, Hash: head.Hash, At: time.Now().UTC(), KeyID: KeyID(pub)}
	a.Signature = base64Std(ed25519.Sign(key, a.Message()))
	if _, err := c.AddNote(ctx, store.AuditNote{Kind: store.NoteAnchor, Actor: actor, Detail: a.String()}); err != nil {
		return Anchor{}, err
	}
	return a, nil
}

// The key files: one line, "ed25519-private:" or "ed25519-public:" then the
// 32-byte seed or public key in standard base64.
const (
	privatePrefix = "ed25519-private:"
	publicPrefix  = "ed25519-public:"
)

// GenerateKey returns a new signing key in the key file's form and its
// public key in the public key file's form.
func GenerateKey() (private, public string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", err
	}
	return privatePrefix + base64.StdEncoding.EncodeToString(priv.Seed()) + "\n",
		publicPrefix + base64.StdEncoding.EncodeToString(pub) + "\n", nil
}

// ReadSigningKey reads a signing key file. Errors never quote the file's
// content.
func ReadSigningKey(path string) (ed25519.PrivateKey, error) {
	b, err := readKeyFile(path, privatePrefix, ed25519.SeedSize)
	if err != nil {
		return nil, err
	}
	return ed25519.NewKeyFromSeed(b), nil
}

// ReadVerifyKey reads a public key file, or the public half of a signing
// key file.
func ReadVerifyKey(path string) (ed25519.PublicKey, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: key file: %v", outbox.ErrInvalidConfig, err)
	}
	if strings.HasPrefix(strings.TrimSpace(string(raw)), privatePrefix) {
		k, err := ReadSigningKey(path)
		if err != nil {
			return nil, err
		}
		return k.Public().(ed25519.PublicKey), nil
	}
	b, err := readKeyFile(path, publicPrefix, ed25519.PublicKeySize)
	if err != nil {
		return nil, err
	}
	return ed25519.PublicKey(b), nil
}

func readKeyFile(path, prefix string, size int) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: key file: %v", outbox.ErrInvalidConfig, err)
	}
	text := strings.TrimSpace(string(raw))
	bad := fmt.Errorf("%w: key file %s: want one line %q followed by %d bytes in base64 (make one with `outbox audit keygen`)",
		outbox.ErrInvalidConfig, path, prefix, size)
	if !strings.HasPrefix(text, prefix) {
		return nil, bad
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(text, prefix))
	if err != nil || len(b) != size {
		return nil, bad
	}
	return b, nil
}

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
