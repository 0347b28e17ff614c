package postgres

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// connectErrorOnce returns err with each distinct failure of a
// *pgconn.ConnectError said once. pgx tries an address twice under the
// default sslmode=prefer (with TLS, then without) and reports every try,
// so a refused connection read "connection refused" twice, word for word.
// The returned error still unwraps to err (errors.Is and errors.As see the
// driver's errors).
func connectErrorOnce(err error) error {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return err
	}
	joined, ok := ce.Unwrap().(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	tries := joined.Unwrap()
	var distinct []string
	seen := make(map[string]bool, len(tries))
	for _, e := range tries {
		if s := e.Error(); !seen[s] {
			seen[s] = true
			distinct = append(distinct, s)
		}
	}
	if len(distinct) == len(tries) {
		return err
	}
	once := "failed to connect to `user=" + ce.Config.User + " database=" + ce.Config.Database + "`: " + strings.Join(distinct, "; ")
	return &onceError{msg: strings.Replace(err.Error(), ce.Error(), once, 1), err: err}
}

// onceError is an error with a rewritten message that unwraps to the
// original.
type onceError struct {
	msg string
	err error
}

func (e *onceError) Error() string { return e.msg }
func (e *onceError) Unwrap() error { return e.err }
