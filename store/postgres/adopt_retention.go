package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/adoptsql"
)

var _ store.AdoptionReporter = (*Store)(nil)

// AdoptedAt implements store.AdoptionReporter: the latest time in the
// adoption record (an adoption run again after an interruption adds to
// it), and false when the table has no adoption record.
func (s *Store) AdoptedAt(ctx context.Context) (time.Time, bool, error) {
	exists, _, err := s.relation(ctx, adoptsql.Table(s.t))
	if err != nil || !exists {
		return time.Time{}, false, err
	}
	var at *time.Time
	if err := s.pool.QueryRow(ctx, adoptSQL(s.t, "record_adopted_at")).Scan(&at); err != nil {
		return time.Time{}, false, fmt.Errorf("read the adoption time of %s: %w", s.t.Outbox, err)
	}
	if at == nil {
		return time.Time{}, false, nil
	}
	return *at, true, nil
}

// purgeKeepsBefore returns the time before which a purge keeps finished
// rows: the adoption's, unless req.Adopted; nil when the purge keeps none.
func (s *Store) purgeKeepsBefore(ctx context.Context, req store.PurgeRequest) (*time.Time, error) {
	if req.Adopted {
		return nil, nil
	}
	at, adopted, err := s.AdoptedAt(ctx)
	if err != nil || !adopted {
		return nil, s.wrap("purge", err)
	}
	return &at, nil
}
