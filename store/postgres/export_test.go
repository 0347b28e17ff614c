package postgres

import (
	"context"
	"log/slog"
	"time"
)

// MigrateUpTo applies the migrations up to version, for upgrade tests.
func (s *Store) MigrateUpTo(ctx context.Context, version int64) error {
	r, done, err := s.migrator()
	if err != nil {
		return err
	}
	defer done()
	_, err = r.UpTo(ctx, version)
	return err
}

// MigrateDownTo reverts the migrations down to version, for upgrade tests.
func (s *Store) MigrateDownTo(ctx context.Context, version int64) error {
	r, done, err := s.migrator()
	if err != nil {
		return err
	}
	defer done()
	return r.DownTo(ctx, version)
}

// LoseClaimAnswers makes the store's next n claims commit and then fail,
// as a claim whose answer is lost does (storetest.Harness.LoseClaimAnswers).
func (s *Store) LoseClaimAnswers(n int) { s.claimer.LoseCommitAnswers(n) }

// SetSafetyNet sets how often the store's claims read the lanes behind
// their cursors, and where the findings are logged.
func (s *Store) SetSafetyNet(log *slog.Logger, every time.Duration) {
	s.claimer.SetSafetyNet(log, every)
}

// LaneCursors returns the cursor of each lane relayID holds.
func (s *Store) LaneCursors(relayID string) map[int]int64 { return s.claimer.Cursors(relayID) }
