package postgres

import (
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/sqladmin"
)

var _ store.AdminQuerier = (*Store)(nil)

// AdminQueries implements store.AdminQuerier over a database/sql handle on
// the store's pool, which opens no connections of its own; Close the
// queries when done (it leaves the pool open).
func (s *Store) AdminQueries() store.AdminQueries {
	return sqladmin.NewOwned(stdlib.OpenDBFromPool(s.pool), sqladmin.Dialect{
		Mark:    func(n int) string { return "$" + strconv.Itoa(n) },
		Quote:   `"`,
		Now:     "now()",
		Ago:     func(m string) string { return "now() - " + m + "::bigint * interval '1 microsecond'" },
		Text:    func(c string) string { return c + "::text" },
		TimeArg: func(t time.Time) any { return t },
		Minute:  func(c string) string { return "date_trunc('minute', " + c + ")" },
		Upsert: "ON CONFLICT (relay_id) DO UPDATE SET heartbeat_at = now(), host = excluded.host, " +
			"started_at = excluded.started_at, in_flight = excluded.in_flight",
		// Migration 10.
		Claimed:    `EXISTS (SELECT 1 FROM "` + s.t.Outbox + `_claims" c WHERE %[1]s = ANY(c.ids))`,
		Held:       "hold = 2 AND ",
		Deliveries: s.t.Outbox + "_deliveries",
	}, s.t)
}
