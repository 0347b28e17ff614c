package dialect

import "testing"

func TestFragments(t *testing.T) {
	pg := Dialect{Dollar: true, Quote: `"`, UpsertOn: "ON CONFLICT (%s) DO UPDATE SET", Excluded: "excluded.%s"}
	my := Dialect{Quote: "`", UpsertOn: "ON DUPLICATE KEY UPDATE", Excluded: "VALUES(%s)"}
	for _, c := range []struct{ got, want string }{
		{pg.P(3), "$3"},
		{my.P(3), "?"},
		{pg.Q("ob"), `"ob"`},
		{my.Q("ob"), "`ob`"},
		{pg.Upsert("relay_id") + " seen_ms = " + pg.Inserted("seen_ms"), "ON CONFLICT (relay_id) DO UPDATE SET seen_ms = excluded.seen_ms"},
		{my.Upsert("relay_id") + " seen_ms = " + my.Inserted("seen_ms"), "ON DUPLICATE KEY UPDATE seen_ms = VALUES(seen_ms)"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
