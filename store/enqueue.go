package store

import (
	"fmt"

	"github.com/txoutbox/outbox"
)

// ErrNilTx is what a backend's Enqueue returns when it is given no
// transaction.
var ErrNilTx = fmt.Errorf("%w: Enqueue needs the caller's transaction, got nil", outbox.ErrInvalidConfig)
