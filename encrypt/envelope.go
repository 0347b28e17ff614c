package encrypt

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
)

// MarkerKey is the key whose presence marks a payload as sealed. Its value
// is the envelope format's version, 1.
const MarkerKey = "outbox_encrypted"

// FormatVersion is the envelope format this package writes and reads.
const FormatVersion = 1

// DataKeySize is the size of a data key and of a key-encryption key:
// AES-256.
const DataKeySize = 32

// NonceSize is the AES-GCM nonce size.
const NonceSize = 12

// Envelope is a sealed payload as stored in the payload column.
type Envelope struct {
	Format     int    `json:"outbox_encrypted"`
	Subject    string `json:"subject"`
	KeyVersion int    `json:"key_version"`
	Nonce      []byte `json:"nonce"`      // base64 (standard, padded) in JSON
	Ciphertext []byte `json:"ciphertext"` // AES-GCM output: ciphertext then the 16-byte tag
}

// ErrNotSealed is returned by ParseEnvelope for a payload that is not an
// envelope: plain JSON, delivered as it is.
var ErrNotSealed = errors.New("encrypt: the payload is not sealed")

// IsSealed reports whether payload is an envelope: a JSON object with the
// marker key. It is cheap: it looks for the marker before parsing.
func IsSealed(payload []byte) bool {
	_, err := ParseEnvelope(payload)
	return err == nil
}

// ErrUnreadable matches the errors of a sealed payload that can never be
// read, whatever key this process is given: a malformed envelope, one
// sealed for another event or subject or changed since, one whose data
// key is not in the store. A shredded key gives ErrShredded instead.
var ErrUnreadable = errors.New("encrypt: the sealed payload cannot be read")

// ParseEnvelope reads a sealed payload. It returns ErrNotSealed for a
// payload without the marker key, and a descriptive error for an envelope
// that is malformed or of an unknown format.
func ParseEnvelope(payload []byte) (Envelope, error) {
	trimmed := bytes.TrimSpace(payload)
	if len(trimmed) == 0 || trimmed[0] != '{' || !bytes.Contains(trimmed, []byte(`"`+MarkerKey+`"`)) {
		return Envelope{}, ErrNotSealed
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &probe); err != nil {
		return Envelope{}, ErrNotSealed
	}
	if _, ok := probe[MarkerKey]; !ok {
		return Envelope{}, ErrNotSealed
	}
	var e Envelope
	if err := json.Unmarshal(trimmed, &e); err != nil {
		return Envelope{}, fmt.Errorf("%w: malformed envelope: %v (see docs/ENCRYPTION.md for the format)", ErrUnreadable, err)
	}
	switch {
	case e.Format != FormatVersion:
		return Envelope{}, fmt.Errorf("%w: envelope format %d is not known; this version reads format %d", ErrUnreadable, e.Format, FormatVersion)
	case e.Subject == "":
		return Envelope{}, fmt.Errorf("%w: malformed envelope: subject is empty", ErrUnreadable)
	case e.KeyVersion < 1:
		return Envelope{}, fmt.Errorf("%w: malformed envelope: key_version %d; versions start at 1", ErrUnreadable, e.KeyVersion)
	case len(e.Nonce) != NonceSize:
		return Envelope{}, fmt.Errorf("%w: malformed envelope: nonce is %d bytes; want %d", ErrUnreadable, len(e.Nonce), NonceSize)
	case len(e.Ciphertext) < 16:
		return Envelope{}, fmt.Errorf("%w: malformed envelope: ciphertext is %d bytes, shorter than the 16-byte tag", ErrUnreadable, len(e.Ciphertext))
	}
	return e, nil
}

// Marshal returns the envelope's JSON, the bytes stored in the payload
// column.
func (e Envelope) Marshal() []byte {
	b, err := json.Marshal(e)
	if err != nil { // only []byte, string and int fields: cannot fail
		panic(err)
	}
	return b
}

// AdditionalData is what AES-GCM authenticates beside the payload: the
// format version, the event id (its canonical UUID text) and the subject,
// each ended by a zero byte:
//
//	"outbox-payload-v1\x00" + eventID + "\x00" + subject + "\x00"
func AdditionalData(eventID, subject string) []byte {
	ad := make([]byte, 0, 20+len(eventID)+len(subject))
	ad = append(ad, "outbox-payload-v1\x00"...)
	ad = append(ad, eventID...)
	ad = append(ad, 0)
	ad = append(ad, subject...)
	return append(ad, 0)
}

// Seal encrypts payload for the event eventID under the subject's data key
// of the given version, and returns the envelope's JSON.
func Seal(dataKey []byte, eventID, subject string, version int, payload []byte) ([]byte, error) {
	aead, err := newGCM(dataKey)
	if err != nil {
		return nil, err
	}
	if subject == "" {
		return nil, errors.New("encrypt: the subject is empty: name the aggregate, merchant or customer whose key seals the payload")
	}
	nonce := make([]byte, NonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("encrypt: read a nonce: %w", err)
	}
	ct := aead.Seal(nil, nonce, payload, AdditionalData(eventID, subject))
	return Envelope{Format: FormatVersion, Subject: subject, KeyVersion: version, Nonce: nonce, Ciphertext: ct}.Marshal(), nil
}

// Open decrypts the envelope e of the event eventID with its data key.
// It fails if the envelope was sealed for another event or subject, or
// changed.
func Open(dataKey []byte, eventID string, e Envelope) ([]byte, error) {
	aead, err := newGCM(dataKey)
	if err != nil {
		return nil, err
	}
	pt, err := aead.Open(nil, e.Nonce, e.Ciphertext, AdditionalData(eventID, e.Subject))
	if err != nil {
		return nil, fmt.Errorf("%w: the payload of event %s does not open with key version %d of subject %q: it was sealed for another event or subject, or changed", ErrUnreadable, eventID, e.KeyVersion, e.Subject)
	}
	return pt, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	if len(key) != DataKeySize {
		return nil, fmt.Errorf("encrypt: a key is %d bytes; want %d (AES-256)", len(key), DataKeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("encrypt: %w", err)
	}
	return cipher.NewGCM(block)
}
