package encrypt

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// KeyWrapper wraps and unwraps data keys with a key-encryption key (KEK)
// that never leaves it. [LocalKEK] holds the KEK in memory (from a key file
// or an environment variable); a KMS plugs in by implementing the
// interface. Implementations are safe for concurrent use.
type KeyWrapper interface {
	// KeyID names the KEK, so that rotation tells keys apart. It is stored
	// beside every data key it wrapped. It must not reveal the key.
	KeyID() string
	// Wrap encrypts a data key.
	Wrap(ctx context.Context, dataKey []byte) ([]byte, error)
	// Unwrap decrypts a data key that Wrap returned.
	Unwrap(ctx context.Context, wrapped []byte) ([]byte, error)
}

// LocalKEK is a 32-byte key-encryption key held in memory. It wraps a data
// key with AES-256-GCM: a 12-byte random nonce followed by the sealed key
// and its tag, with "outbox-data-key-v1\x00" + KeyID() as additional data.
type LocalKEK struct {
	id  string
	key []byte
}

// NewLocalKEK makes a KEK of 32 bytes. Its id is "kek-" and the first 16
// hex digits of the SHA-256 of a fixed label and the key: the same key
// always has the same id, and the id does not reveal the key.
func NewLocalKEK(key []byte) (*LocalKEK, error) {
	if len(key) != DataKeySize {
		return nil, fmt.Errorf("encrypt: a key-encryption key is %d bytes; this one is %d bytes", DataKeySize, len(key))
	}
	h := sha256.New()
	h.Write([]byte("outbox-kek-id-v1\x00"))
	h.Write(key)
	return &LocalKEK{id: "kek-" + hex.EncodeToString(h.Sum(nil)[:8]), key: append([]byte(nil), key...)}, nil
}

// KeyFromText decodes a key-encryption key written as 64 hex digits or as
// base64 (standard or URL alphabet, padded or not) of 32 bytes; spaces and
// line ends around it are ignored. Its errors describe the text's shape,
// never its content.
func KeyFromText(text string) ([]byte, error) {
	s := strings.TrimSpace(text)
	if s == "" {
		return nil, errors.New("it is empty; write 32 random bytes as 64 hex digits or 44 base64 characters (for example `openssl rand -base64 32`)")
	}
	if len(s) == 2*DataKeySize {
		if k, err := hex.DecodeString(s); err == nil {
			return k, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil {
			if len(k) != DataKeySize {
				return nil, fmt.Errorf("it decodes (base64) to %d bytes; a key-encryption key is %d bytes (for example `openssl rand -base64 32`)", len(k), DataKeySize)
			}
			return k, nil
		}
	}
	return nil, fmt.Errorf("it is %d characters that are neither 64 hex digits nor base64; write 32 random bytes as 64 hex digits or 44 base64 characters (for example `openssl rand -base64 32`)", len(s))
}

// KEKFromFile reads a key-encryption key from a file (see KeyFromText for
// the forms). Errors name the file, never its content.
func KEKFromFile(path string) (*LocalKEK, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("encrypt: read the key-encryption key file: %w", err)
	}
	k, err := KeyFromText(string(b))
	if err != nil {
		return nil, fmt.Errorf("encrypt: the key-encryption key file %s: %v", path, err)
	}
	return NewLocalKEK(k)
}

// KEKFromEnv reads a key-encryption key from the environment variable
// name (see KeyFromText for the forms). Errors name the variable, never
// its value.
func KEKFromEnv(name string) (*LocalKEK, error) {
	v, ok := os.LookupEnv(name)
	if !ok {
		return nil, fmt.Errorf("encrypt: the environment variable %s that should hold the key-encryption key is not set", name)
	}
	k, err := KeyFromText(v)
	if err != nil {
		return nil, fmt.Errorf("encrypt: the key-encryption key in the environment variable %s: %v", name, err)
	}
	return NewLocalKEK(k)
}

// KeyID implements KeyWrapper.
func (k *LocalKEK) KeyID() string { return k.id }

// String names the KEK by its id only, so that printing it never prints
// the key.
func (k *LocalKEK) String() string { return "LocalKEK(" + k.id + ")" }

// GoString is String, for %#v.
func (k *LocalKEK) GoString() string { return k.String() }

func (k *LocalKEK) additionalData() []byte { return []byte("outbox-data-key-v1\x00" + k.id) }

// Wrap implements KeyWrapper.
func (k *LocalKEK) Wrap(_ context.Context, dataKey []byte) ([]byte, error) {
	if len(dataKey) != DataKeySize {
		return nil, fmt.Errorf("encrypt: a data key is %d bytes; this one is %d", DataKeySize, len(dataKey))
	}
	aead, err := newGCM(k.key)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, NonceSize, NonceSize+DataKeySize+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("encrypt: read a nonce: %w", err)
	}
	return aead.Seal(nonce, nonce, dataKey, k.additionalData()), nil
}

// Unwrap implements KeyWrapper.
func (k *LocalKEK) Unwrap(_ context.Context, wrapped []byte) ([]byte, error) {
	aead, err := newGCM(k.key)
	if err != nil {
		return nil, err
	}
	if len(wrapped) != NonceSize+DataKeySize+aead.Overhead() {
		return nil, fmt.Errorf("encrypt: a wrapped data key is %d bytes; this one is %d", NonceSize+DataKeySize+aead.Overhead(), len(wrapped))
	}
	dk, err := aead.Open(nil, wrapped[:NonceSize], wrapped[NonceSize:], k.additionalData())
	if err != nil {
		return nil, fmt.Errorf("encrypt: the data key does not unwrap with key-encryption key %s: it was wrapped by another key, or changed", k.id)
	}
	return dk, nil
}

// NewDataKey returns 32 random bytes.
func NewDataKey() ([]byte, error) {
	k := make([]byte, DataKeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("encrypt: read a data key: %w", err)
	}
	return k, nil
}
