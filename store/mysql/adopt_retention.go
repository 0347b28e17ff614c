package mysql

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
// it), in UTC, and false when the table has no adoption record.
func (s *Store) AdoptedAt(ctx context.Context) (time.Time, bool, error) {
	exists, err := s.tableExists(ctx, adoptsql.Table(s.t))
	if err != nil || !exists {
		return time.Time{}, false, err
	}
	var at nullTime
	if err := s.db.QueryRowContext(ctx, adoptSQL(s.t, "record_adopted_at")).Scan(&at); err != nil {
		return time.Time{}, false, fmt.Errorf("read the adoption time of %s: %w", s.t.Outbox, err)
	}
	return at.Time, !at.Time.IsZero(), nil
}

// purgeKeepCond returns the condition a purgeable row must also meet: on
// an adopted table, unless req.Adopted, that it finished after the
// adoption (the rows that finished earlier are the team's history). The
// time is formatted here from the database's own value, so nothing from
// input reaches the statement text.
func (s *Store) purgeKeepCond(ctx context.Context, req store.PurgeRequest) (string, error) {
	if req.Adopted {
		return "", nil
	}
	at, adopted, err := s.AdoptedAt(ctx)
	if err != nil || !adopted {
		return "", s.wrap("purge", err)
	}
	return " AND processed_at > CAST('" + formatTime(at) + "' AS DATETIME(6))", nil
}
