package mysql

import (
	"time"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/sqladmin"
)

var _ store.AdminQuerier = (*Store)(nil)

// AdminQueries implements store.AdminQuerier.
func (s *Store) AdminQueries() store.AdminQueries {
	return sqladmin.New(s.db, sqladmin.Dialect{
		Mark:    func(int) string { return "?" },
		Quote:   "`",
		Now:     "UTC_TIMESTAMP(6)",
		Ago:     func(m string) string { return "UTC_TIMESTAMP(6) - INTERVAL " + m + " MICROSECOND" },
		Text:    func(c string) string { return c },
		TimeArg: func(t time.Time) any { return t.UTC() },
		Minute:  func(c string) string { return "DATE_FORMAT(" + c + ", '%Y-%m-%d %H:%i:00')" },
		// A delivery is recorded on the event row (migration 00006).
		DeliveredOnRow: true,
		Integer:        "SIGNED",
		// Migration 00007: a PENDING row a claim holds is PROCESSING. No
		// table of the subquery has a column "id", which would capture an
		// unqualified %[1]s.
		Claimed: "EXISTS (SELECT 1 FROM `" + s.t.Outbox + "_claims` bc, JSON_TABLE(bc.ids, '$[*]' COLUMNS (cid BIGINT PATH '$')) AS j WHERE j.cid = %[1]s)",
		Upsert: "ON DUPLICATE KEY UPDATE heartbeat_at = UTC_TIMESTAMP(6), host = VALUES(host), " +
			"started_at = VALUES(started_at), in_flight = VALUES(in_flight)",
	}, s.t)
}
