package store

import (
	"errors"
)

// ErrRefused marks an error of Complete (or another write) that the
// database gave because of the data it was asked to store: a text it
// cannot hold, a value over a column's limit, a constraint. Unlike a lost
// connection, retrying the same write cannot succeed. The backends wrap such
// errors with it; a custom Store may do the same (fmt.Errorf("%w: %w",
// ErrRefused, err)). The relay records
// the other outcomes of a batch whose Complete is refused and ends the
// offending event FAILED, rather than leaving the batch to be sent again.
var ErrRefused = errors.New("the database refused the data")
