package lanes

import (
	"context"
	"errors"
	"sync/atomic"
)

// ErrAnswerLost is what a claim record returns after LoseCommitAnswers.
var ErrAnswerLost = errors.New("lanes: the claim committed, and its answer was lost (a fault injected by a test)")

// LoseCommitAnswers makes the next n claim records commit and then return
// ErrAnswerLost, as a claim does whose deadline, or connection, ends while
// its result is read after the commit. For the stores' tests; call it
// before the claims it is for.
func (c *Claimer) LoseCommitAnswers(n int) {
	lb := &losingBackend{Backend: c.b}
	lb.left.Store(int64(n))
	c.b = lb
}

// losingBackend loses the answers of its next left claim records.
type losingBackend struct {
	Backend
	left atomic.Int64
}

// Refused: a lost answer is no refusal.
func (b *losingBackend) Refused(err error) bool {
	return !errors.Is(err, ErrAnswerLost) && b.Backend.Refused(err)
}

func (b *losingBackend) CommitClaim(ctx context.Context, r CommitRequest) (CommitResult, error) {
	res, err := b.Backend.CommitClaim(ctx, r)
	if err != nil || b.left.Add(-1) < 0 {
		return res, err
	}
	return CommitResult{}, ErrAnswerLost
}
