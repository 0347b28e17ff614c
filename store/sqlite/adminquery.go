package sqlite

import (
	"time"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/sqladmin"
)

var _ store.AdminQuerier = (*Store)(nil)

const sqliteNow = "strftime('%Y-%m-%d %H:%M:%f', 'now')"

// AdminQueries implements store.AdminQuerier.
func (s *Store) AdminQueries() store.AdminQueries {
	return sqladmin.New(s.db, sqladmin.Dialect{
		Mark:  func(int) string { return "?" },
		Quote: `"`,
		Now:   sqliteNow,
		Ago: func(m string) string {
			return "strftime('%Y-%m-%d %H:%M:%f', 'now', (-" + m + " / 1000000.0) || ' seconds')"
		},
		Text:    func(c string) string { return c },
		TimeArg: func(t time.Time) any { return formatTime(t) },
		Minute:  func(c string) string { return "substr(" + c + ", 1, 16) || ':00'" },
		// A delivery is recorded on the event row (migration 00006).
		DeliveredOnRow: true,
		// Migration 00007.
		Claimed: `EXISTS (SELECT 1 FROM "` + s.t.Outbox + `_claims" bc, json_each(bc.ids) j WHERE j.value = %[1]s)`,
		Upsert: "ON CONFLICT (relay_id) DO UPDATE SET heartbeat_at = " + sqliteNow +
			", host = excluded.host, started_at = excluded.started_at, in_flight = excluded.in_flight",
	}, s.t)
}
