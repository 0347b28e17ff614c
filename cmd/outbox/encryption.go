package main

import (
	"fmt"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
)

// EncryptionFlags give the key-encryption keys of payload encryption
// (docs/ENCRYPTION.md). Like the admin tokens, a key is never a flag's
// value, which the process list would show: it is read from a file, or
// from the environment variable the flag names.
type EncryptionFlags struct {
	EncryptionKeyFile string `name:"encryption-key-file" help:"Encrypt payloads at rest: the file holding the key-encryption key (32 bytes as 64 hex digits or base64, e.g. from 'openssl rand -base64 32'); see docs/ENCRYPTION.md." env:"OUTBOX_ENCRYPTION_KEY_FILE" placeholder:"FILE"`
	EncryptionKeyEnv  string `name:"encryption-key-env" help:"Encrypt payloads at rest: the name of the environment variable holding the key-encryption key (instead of --encryption-key-file)." env:"OUTBOX_ENCRYPTION_KEY_ENV" placeholder:"NAME"`
	PreviousKeyFile   string `name:"encryption-previous-key-file" help:"During a key rotation: the file holding the key-encryption key being replaced, which still unwraps the data keys not yet rewrapped." env:"OUTBOX_ENCRYPTION_PREVIOUS_KEY_FILE" placeholder:"FILE"`
	PreviousKeyEnv    string `name:"encryption-previous-key-env" help:"During a key rotation: the name of the environment variable holding the key-encryption key being replaced." env:"OUTBOX_ENCRYPTION_PREVIOUS_KEY_ENV" placeholder:"NAME"`
}

// keyring returns the keyring the flags give, or nil when they give no
// key (payloads are then neither sealed nor opened).
func (f EncryptionFlags) keyring() (*encrypt.Keyring, error) {
	current, err := kekFrom("--encryption-key-file", f.EncryptionKeyFile, "--encryption-key-env", f.EncryptionKeyEnv)
	if err != nil {
		return nil, err
	}
	previous, err := kekFrom("--encryption-previous-key-file", f.PreviousKeyFile, "--encryption-previous-key-env", f.PreviousKeyEnv)
	if err != nil {
		return nil, err
	}
	switch {
	case current == nil && previous == nil:
		return nil, nil
	case current == nil:
		return nil, fmt.Errorf("%w: a previous key-encryption key is given without the current one: give --encryption-key-file or --encryption-key-env too", outbox.ErrInvalidConfig)
	case previous == nil:
		return encrypt.NewKeyring(current)
	case previous.KeyID() == current.KeyID():
		return nil, fmt.Errorf("%w: the previous key-encryption key is the current one (%s): give the key being replaced", outbox.ErrInvalidConfig, current.KeyID())
	}
	return encrypt.NewKeyring(current, previous)
}

// kekFrom reads a key-encryption key from the file or the environment
// variable, whichever is given (not both).
func kekFrom(fileFlag, file, envFlag, env string) (*encrypt.LocalKEK, error) {
	switch {
	case file != "" && env != "":
		return nil, fmt.Errorf("%w: give %s or %s, not both", outbox.ErrInvalidConfig, fileFlag, envFlag)
	case file != "":
		k, err := encrypt.KEKFromFile(file)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", outbox.ErrInvalidConfig, fileFlag, err)
		}
		return k, nil
	case env != "":
		k, err := encrypt.KEKFromEnv(env)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", outbox.ErrInvalidConfig, envFlag, err)
		}
		return k, nil
	}
	return nil, nil
}
