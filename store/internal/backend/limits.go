package backend

import (
	"github.com/txoutbox/outbox/store"
)

// DeadLetterLimit returns how many rows Store.DeadLetters returns for
// limit: limit itself from 1 to 1000, otherwise 100.
func DeadLetterLimit(limit int) int {
	if limit <= 0 || limit > 1000 {
		return 100
	}
	return limit
}

// RelaysTable is the heartbeat table of outbox table t (migration 00005).
func RelaysTable(t store.Tables) string { return t.Outbox + "_relays" }

// MaxOverdueGroups bounds store.Overdue.Groups (its doc says 20).
const MaxOverdueGroups = 20

// OverdueWhere is the condition of an overdue row, in SQL common to the
// backends; {now} is the backend's database clock.
const OverdueWhere = `expires_at IS NOT NULL AND expires_at <= {now}
    AND (status IN ('PENDING', 'BLOCKED') OR (status = 'PROCESSING' AND locked_until < {now}))`
