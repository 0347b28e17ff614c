package store

import (
	"fmt"
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
