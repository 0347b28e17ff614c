package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
)

// KeyTable names the table of an outbox's data keys (payload encryption,
// docs/ENCRYPTION.md).
func (t Tables) KeyTable() string { return t.Outbox + "_keys" }

// DataKeyCursor is where a page of DataKeys starts: after this subject and
// version. The zero value starts at the beginning.
type DataKeyCursor struct {
	Subject string
	Version int
}

// After returns the cursor after k.
func After(k encrypt.DataKey) DataKeyCursor {
	return DataKeyCursor{Subject: k.Subject, Version: k.Version}
}

// SealedPayload is the envelope that replaces the plain payload of the
// row ID, of the event EventID (Store.SealPending).
type SealedPayload struct {
	ID      int64
	EventID outbox.EventID
	Payload []byte
}

// Shred asks to delete every version of a subject's data key.
type Shred struct {
	Subject string
	// Actor and Reason go in the key rows: who shredded and why.
	Actor, Reason string
}

// MaxShredTextRunes bounds a shred's actor and reason.
const MaxShredTextRunes = 2000

// Validate checks a shred request.
func (s Shred) Validate() error {
	if err := encrypt.ValidateSubject(s.Subject); err != nil {
		return fmt.Errorf("%w: %v", outbox.ErrInvalidConfig, err)
	}
	switch {
	case s.Actor == "" || utf8.RuneCountInString(s.Actor) > 200:
		return fmt.Errorf("%w: a shred needs an actor of 1 to 200 characters for the audit", outbox.ErrInvalidConfig)
	case s.Reason == "" || utf8.RuneCountInString(s.Reason) > MaxShredTextRunes:
		return fmt.Errorf("%w: a shred needs a reason of 1 to %d characters for the audit (an erasure request's reference, for example)", outbox.ErrInvalidConfig, MaxShredTextRunes)
	}
	return nil
}

// ValidateDataKey checks a data key before it is stored.
func ValidateDataKey(k encrypt.DataKey) error {
	if err := encrypt.ValidateSubject(k.Subject); err != nil {
		return fmt.Errorf("%w: %v", outbox.ErrInvalidConfig, err)
	}
	switch {
	case k.Version < 1:
		return fmt.Errorf("%w: data key version %d: versions start at 1", outbox.ErrInvalidConfig, k.Version)
	case len(k.Wrapped) == 0 || len(k.Wrapped) > 4096:
		return fmt.Errorf("%w: a wrapped data key is 1 to 4096 bytes; this one is %d", outbox.ErrInvalidConfig, len(k.Wrapped))
	case k.KEKID == "" || len(k.KEKID) > 200:
		return fmt.Errorf("%w: a key-encryption key id is 1 to 200 bytes", outbox.ErrInvalidConfig)
	}
	return nil
}

// RotateResult counts what RotateDataKeys did.
type RotateResult struct {
	// Rewrapped keys were wrapped by a previous key-encryption key and now
	// are by the current one.
	Rewrapped int64
	// AlreadyCurrent keys were wrapped by the current one already (by a
	// producer since the new key was given, or a rotation run before).
	AlreadyCurrent int64
	// Shredded keys have nothing left to rewrap.
	Shredded int64
}

// RotateDataKeys rewraps every data key of s with ring's current
// key-encryption key, a page of pageSize keys at a time (0 means 500).
// Each key changes in one statement, only if it is still wrapped as read,
// so producers and relays keep running meanwhile: a process that holds
// the old and the new key-encryption keys reads every key at every moment.
// It can run again after a failure; it ends when no key is wrapped by
// another key-encryption key.
func RotateDataKeys(ctx context.Context, s Store, ring *encrypt.Keyring, pageSize int) (RotateResult, error) {
	var res RotateResult
	if pageSize <= 0 {
		pageSize = 500
	}
	current := ring.Current().KeyID()
	var after DataKeyCursor
	for {
		page, err := s.DataKeys(ctx, after, pageSize)
		if err != nil {
			return res, err
		}
		if len(page) == 0 {
			return res, nil
		}
		for _, k := range page {
			switch {
			case k.Shredded():
				res.Shredded++
				continue
			case k.KEKID == current:
				res.AlreadyCurrent++
				continue
			}
			rewrapped, err := ring.Rewrap(ctx, k)
			if err != nil {
				return res, fmt.Errorf("rotate: %w", err)
			}
			ok, err := s.RewrapDataKey(ctx, rewrapped, k.KEKID)
			if err != nil {
				return res, fmt.Errorf("rotate: data key of subject %q version %d: %w", k.Subject, k.Version, err)
			}
			if ok {
				res.Rewrapped++
				continue
			}
			// It changed since it was read: shredded, or rewrapped by
			// another rotation.
			now, found, err := s.DataKeyVersion(ctx, k.Subject, k.Version)
			switch {
			case err != nil:
				return res, fmt.Errorf("rotate: data key of subject %q version %d: %w", k.Subject, k.Version, err)
			case found && now.Shredded():
				res.Shredded++
			case found && now.KEKID == current:
				res.AlreadyCurrent++
			default:
				return res, fmt.Errorf("rotate: data key of subject %q version %d changed to key-encryption key %s during the rotation; run it again", k.Subject, k.Version, now.KEKID)
			}
		}
		after = After(page[len(page)-1])
	}
}

// SealedInfo describes a sealed payload to a reader without opening it:
// whose data key sealed it, and whether that key was shredded. Viewers
// (`outbox events show`, the admin API) show it in place of the payload.
type SealedInfo struct {
	Subject     string     `json:"subject"`
	KeyVersion  int        `json:"key_version"`
	Shredded    bool       `json:"shredded,omitempty"`
	ShreddedAt  *time.Time `json:"shredded_at,omitempty"`
	ShredReason string     `json:"shred_reason,omitempty"`
}

// DescribeSealed reports whether payload is sealed and, if so, what
// SealedInfo says of it; with a key store (nil skips it), whether its key
// was shredded.
func DescribeSealed(ctx context.Context, ks encrypt.KeyStore, payload []byte) (SealedInfo, bool, error) {
	e, err := encrypt.ParseEnvelope(payload)
	if err != nil {
		return SealedInfo{}, false, nil
	}
	info := SealedInfo{Subject: e.Subject, KeyVersion: e.KeyVersion}
	if ks == nil {
		return info, true, nil
	}
	k, ok, err := ks.DataKeyVersion(ctx, e.Subject, e.KeyVersion)
	if err != nil {
		return info, true, err
	}
	if ok && k.Shredded() {
		at := k.ShreddedAt.UTC()
		info.Shredded, info.ShreddedAt, info.ShredReason = true, &at, k.ShredReason
	}
	return info, true, nil
}

// Placeholder is the JSON shown in place of a sealed payload:
// {"encrypted": {"subject": ..., "key_version": ...}}.
func (i SealedInfo) Placeholder() json.RawMessage {
	b, _ := json.Marshal(map[string]SealedInfo{"encrypted": i})
	return b
}

// String is the placeholder as one line of text.
func (i SealedInfo) String() string {
	s := fmt.Sprintf("encrypted (subject %s, key version %d)", i.Subject, i.KeyVersion)
	if i.Shredded {
		s += fmt.Sprintf("; its key was shredded at %s (%s): the payload can no longer be read", i.ShreddedAt.Format(time.RFC3339), i.ShredReason)
	}
	return s
}
