package sqlite

import "context"

// MigrateUpTo applies the migrations up to version, for upgrade tests.
func (s *Store) MigrateUpTo(ctx context.Context, version int64) error {
	r, err := s.migrator()
	if err != nil {
		return err
	}
	_, err = r.UpTo(ctx, version)
	return err
}

// MigrateDownTo reverts the migrations down to version, for upgrade tests.
func (s *Store) MigrateDownTo(ctx context.Context, version int64) error {
	r, err := s.migrator()
	if err != nil {
		return err
	}
	return r.DownTo(ctx, version)
}

// LoseClaimAnswers makes the store's next n claims commit and then fail,
// as a claim whose answer is lost does (storetest.Harness.LoseClaimAnswers).
func (s *Store) LoseClaimAnswers(n int) { s.claimer.LoseCommitAnswers(n) }

// IsBusy reports SQLITE_BUSY or SQLITE_LOCKED: a transaction that could not
// have the write lock within busy_timeout, and so committed nothing
// (storetest.Harness.Conflict).
var IsBusy = isBusy
