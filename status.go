package outbox

import (
	"fmt"
	"strings"
)

// Status is the state of an outbox row. The state machine:
//
//	PENDING --claim--> PROCESSING --ok--> PROCESSED
//	   ^                  |--retryable error, retries left--> PENDING (retry_count+1, later available_at)
//	   |                  |--retries exhausted or permanent--> FAILED (+ dead letter, alarm)
//	   |                  `--past expires_at--> EXPIRED (never sent)
//	   `--lease expired---'   (the reaper; retry_count kept)
//	PENDING --an earlier event of the aggregate FAILED--> BLOCKED
//	FAILED/EXPIRED --operator requeue--> PENDING;  FAILED --operator skip--> SKIPPED
//
// PROCESSED, FAILED, EXPIRED and SKIPPED are final unless an operator acts.
type Status string

const (
	StatusPending    Status = "PENDING"
	StatusProcessing Status = "PROCESSING"
	StatusProcessed  Status = "PROCESSED"
	StatusFailed     Status = "FAILED"
	StatusExpired    Status = "EXPIRED"
	// StatusBlocked: waiting behind a FAILED event of the same aggregate.
	StatusBlocked Status = "BLOCKED"
	// StatusSkipped: FAILED, then an operator chose to let the aggregate
	// move on without it. It stays in the dead-letter table.
	StatusSkipped Status = "SKIPPED"
)

// Statuses lists every status in state-machine order.
var Statuses = []Status{StatusPending, StatusProcessing, StatusProcessed, StatusFailed, StatusExpired, StatusBlocked, StatusSkipped}

// ParseStatus accepts a status name in any case.
func ParseStatus(s string) (Status, error) {
	u := Status(strings.ToUpper(strings.TrimSpace(s)))
	for _, st := range Statuses {
		if u == st {
			return st, nil
		}
	}
	names := make([]string, len(Statuses))
	for i, st := range Statuses {
		names[i] = string(st)
	}
	return "", fmt.Errorf("unknown status %q: use one of %s", s, strings.Join(names, ", "))
}

// Final reports whether no relay will change a row in this status.
func (s Status) Final() bool {
	switch s {
	case StatusProcessed, StatusFailed, StatusExpired, StatusSkipped:
		return true
	}
	return false
}
