package encrypt

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxSubjectLen is the longest subject, in characters.
const MaxSubjectLen = 256

// DataKey is one stored data key: a subject's key of one version, wrapped
// by the key-encryption key KEKID. A shredded key has no Wrapped bytes.
type DataKey struct {
	Subject string
	Version int
	Wrapped []byte
	KEKID   string

	CreatedAt time.Time
	// ShreddedAt is zero unless the key was shredded, by ShreddedBy for
	// ShredReason.
	ShreddedAt  time.Time
	ShreddedBy  string
	ShredReason string
}

// Shredded reports whether the key was shredded.
func (k DataKey) Shredded() bool { return !k.ShreddedAt.IsZero() }

// KeyStore keeps the wrapped data keys (the <table>_keys table of every
// backend; the store package's Store implements it).
type KeyStore interface {
	// CreateDataKey stores k unless the store has a key of k's subject and
	// version already; it returns the stored key (the other one when it
	// lost a race).
	CreateDataKey(ctx context.Context, k DataKey) (DataKey, error)
	// LatestDataKey returns the subject's key of the highest version,
	// shredded or not; ok is false when the subject has none.
	LatestDataKey(ctx context.Context, subject string) (k DataKey, ok bool, err error)
	// DataKeyVersion returns one version of the subject's key; ok is false
	// when it has none.
	DataKeyVersion(ctx context.Context, subject string, version int) (k DataKey, ok bool, err error)
}

// ShreddedError says that the data key a payload was sealed with was
// shredded: the payload can never be read again.
type ShreddedError struct {
	Subject string
	Version int
	At      time.Time
	Reason  string
}

func (e *ShreddedError) Error() string {
	return fmt.Sprintf("encrypt: the data key of subject %q (version %d) was shredded at %s (%s): the payload can no longer be read",
		e.Subject, e.Version, e.At.UTC().Format(time.RFC3339), e.Reason)
}

// ErrShredded matches every *ShreddedError with errors.Is.
var ErrShredded = errors.New("encrypt: data key shredded")

// Is makes errors.Is(err, ErrShredded) true.
func (e *ShreddedError) Is(target error) bool { return target == ErrShredded }

// ErrUnknownKEK is returned when a data key is wrapped by a key-encryption
// key this keyring does not hold.
var ErrUnknownKEK = errors.New("encrypt: data key wrapped by an unknown key-encryption key")

// Keyring seals and opens payloads: it holds the current key-encryption
// key, which wraps new data keys, and the previous ones, which still
// unwrap the data keys not yet rewrapped during a rotation.
type Keyring struct {
	current  KeyWrapper
	previous []KeyWrapper
}

// NewKeyring returns a keyring that wraps new data keys with current and
// unwraps with current or any of previous.
func NewKeyring(current KeyWrapper, previous ...KeyWrapper) (*Keyring, error) {
	if current == nil {
		return nil, errors.New("encrypt: a keyring needs a key-encryption key")
	}
	for _, p := range previous {
		if p == nil {
			return nil, errors.New("encrypt: a previous key-encryption key is nil")
		}
	}
	return &Keyring{current: current, previous: previous}, nil
}

// Current returns the key-encryption key that wraps new data keys.
func (r *Keyring) Current() KeyWrapper { return r.current }

// wrapper returns the KEK of id.
func (r *Keyring) wrapper(id string) (KeyWrapper, error) {
	if r.current.KeyID() == id {
		return r.current, nil
	}
	for _, p := range r.previous {
		if p.KeyID() == id {
			return p, nil
		}
	}
	have := []string{r.current.KeyID()}
	for _, p := range r.previous {
		have = append(have, p.KeyID())
	}
	return nil, fmt.Errorf("%w: it is wrapped by %s and this process holds %s; give this process the key-encryption key of that id (during a rotation, as the previous key)",
		ErrUnknownKEK, id, strings.Join(have, ", "))
}

// Unwrap returns the plain data key of k, or a *ShreddedError.
func (r *Keyring) Unwrap(ctx context.Context, k DataKey) ([]byte, error) {
	if k.Shredded() {
		return nil, &ShreddedError{Subject: k.Subject, Version: k.Version, At: k.ShreddedAt, Reason: k.ShredReason}
	}
	w, err := r.wrapper(k.KEKID)
	if err != nil {
		return nil, fmt.Errorf("data key of subject %q (version %d): %w", k.Subject, k.Version, err)
	}
	return w.Unwrap(ctx, k.Wrapped)
}

// Rewrap returns k wrapped by the current key-encryption key. A key the
// current one wraps already, or a shredded key, comes back as it is.
func (r *Keyring) Rewrap(ctx context.Context, k DataKey) (DataKey, error) {
	if k.Shredded() || k.KEKID == r.current.KeyID() {
		return k, nil
	}
	dk, err := r.Unwrap(ctx, k)
	if err != nil {
		return k, err
	}
	wrapped, err := r.current.Wrap(ctx, dk)
	if err != nil {
		return k, err
	}
	k.Wrapped, k.KEKID = wrapped, r.current.KeyID()
	return k, nil
}

// ValidateSubject checks a subject: 1 to MaxSubjectLen characters of
// UTF-8 text without control characters.
func ValidateSubject(subject string) error {
	switch {
	case subject == "":
		return errors.New("encrypt: the subject is empty")
	case !utf8.ValidString(subject):
		return errors.New("encrypt: the subject is not valid UTF-8")
	case utf8.RuneCountInString(subject) > MaxSubjectLen:
		return fmt.Errorf("encrypt: the subject is %d characters; the limit is %d", utf8.RuneCountInString(subject), MaxSubjectLen)
	case strings.IndexFunc(subject, unicode.IsControl) >= 0:
		return errors.New("encrypt: the subject contains a control character")
	}
	return nil
}

// dataKeyFor returns the subject's current data key in plain, creating
// version 1 (or the next version after a shredded one) when there is
// none.
func (r *Keyring) dataKeyFor(ctx context.Context, ks KeyStore, subject string) (int, []byte, error) {
	if err := ValidateSubject(subject); err != nil {
		return 0, nil, err
	}
	latest, ok, err := ks.LatestDataKey(ctx, subject)
	if err != nil {
		return 0, nil, fmt.Errorf("encrypt: read the data key of subject %q: %w", subject, err)
	}
	if ok && !latest.Shredded() {
		dk, err := r.Unwrap(ctx, latest)
		return latest.Version, dk, err
	}
	version := 1
	if ok {
		version = latest.Version + 1
	}
	plain, err := NewDataKey()
	if err != nil {
		return 0, nil, err
	}
	wrapped, err := r.current.Wrap(ctx, plain)
	if err != nil {
		return 0, nil, err
	}
	stored, err := ks.CreateDataKey(ctx, DataKey{Subject: subject, Version: version, Wrapped: wrapped, KEKID: r.current.KeyID()})
	if err != nil {
		return 0, nil, fmt.Errorf("encrypt: store a data key for subject %q: %w", subject, err)
	}
	if stored.KEKID == r.current.KeyID() && string(stored.Wrapped) == string(wrapped) {
		return version, plain, nil
	}
	dk, err := r.Unwrap(ctx, stored) // another writer made it first
	return stored.Version, dk, err
}

// Seal encrypts payload for the event eventID under the subject's current
// data key, made if the subject has none, and returns the envelope.
func (r *Keyring) Seal(ctx context.Context, ks KeyStore, eventID, subject string, payload []byte) ([]byte, error) {
	version, dk, err := r.dataKeyFor(ctx, ks, subject)
	if err != nil {
		return nil, err
	}
	return Seal(dk, eventID, subject, version, payload)
}

// Open returns the plaintext of a sealed payload of the event eventID. A
// payload that is not sealed is returned as it is. A payload whose key was
// shredded gives a *ShreddedError.
func (r *Keyring) Open(ctx context.Context, ks KeyStore, eventID string, payload []byte) ([]byte, error) {
	e, err := ParseEnvelope(payload)
	if errors.Is(err, ErrNotSealed) {
		return payload, nil
	}
	if err != nil {
		return nil, err
	}
	dk, err := r.openKey(ctx, ks, e)
	if err != nil {
		return nil, err
	}
	return Open(dk, eventID, e)
}

// openKey returns the plain data key that sealed e.
func (r *Keyring) openKey(ctx context.Context, ks KeyStore, e Envelope) ([]byte, error) {
	k, ok, err := ks.DataKeyVersion(ctx, e.Subject, e.KeyVersion)
	if err != nil {
		return nil, fmt.Errorf("encrypt: read the data key of subject %q: %w", e.Subject, err)
	}
	if !ok {
		return nil, fmt.Errorf("%w: subject %q has no data key of version %d", ErrUnreadable, e.Subject, e.KeyVersion)
	}
	return r.Unwrap(ctx, k)
}

// DefaultSubject is the subject of an event that names none: its
// aggregate, "<aggregate type>/<aggregate id>".
func DefaultSubject(aggregateType, aggregateID string) string {
	return aggregateType + "/" + aggregateID
}

// Batch seals or opens several payloads, reading each subject's key once:
// one producer's call, or one relay's claim. It is not safe for concurrent
// use.
type Batch struct {
	r      *Keyring
	ks     KeyStore
	sealBy map[string]plainKey // subject -> its current key
	openBy map[string]plainKey // subject + "\x00" + version -> key
}

type plainKey struct {
	version int
	key     []byte
	err     error
}

// Batch returns a batch over the key store ks.
func (r *Keyring) Batch(ks KeyStore) *Batch {
	return &Batch{r: r, ks: ks, sealBy: map[string]plainKey{}, openBy: map[string]plainKey{}}
}

// Seal is Keyring.Seal with the subject's key read once per batch.
func (b *Batch) Seal(ctx context.Context, eventID, subject string, payload []byte) ([]byte, error) {
	k, ok := b.sealBy[subject]
	if !ok {
		k.version, k.key, k.err = b.r.dataKeyFor(ctx, b.ks, subject)
		b.sealBy[subject] = k
	}
	if k.err != nil {
		return nil, k.err
	}
	return Seal(k.key, eventID, subject, k.version, payload)
}

// Open is Keyring.Open with each key read once per batch.
func (b *Batch) Open(ctx context.Context, eventID string, payload []byte) ([]byte, error) {
	e, err := ParseEnvelope(payload)
	if errors.Is(err, ErrNotSealed) {
		return payload, nil
	}
	if err != nil {
		return nil, err
	}
	id := e.Subject + "\x00" + strconv.Itoa(e.KeyVersion)
	k, ok := b.openBy[id]
	if !ok {
		k.key, k.err = b.r.openKey(ctx, b.ks, e)
		b.openBy[id] = k
	}
	if k.err != nil {
		return nil, k.err
	}
	return Open(k.key, eventID, e)
}
