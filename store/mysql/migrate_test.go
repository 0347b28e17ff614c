package mysql

import (
	"strings"
	"testing"

	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store"
)

// renderMigrations renders every migration file as the store does for a
// server of that flavor.
func renderMigrations(t *testing.T, mariaDB bool) string {
	t.Helper()
	tb, err := store.TablesFor("render_check")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := migrationsFS.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, e := range entries {
		raw, err := migrationsFS.ReadFile("migrations/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		tpl, err := sqltext.Parse(e.Name(), string(raw))
		if err != nil {
			t.Fatal(err)
		}
		text, err := tpl.Render(migrationNames{Tables: tb, mariaDB: mariaDB})
		if err != nil {
			t.Fatal(err)
		}
		all.WriteString(text)
	}
	return all.String()
}

// On MySQL the payload columns must be text, kept byte for byte, with the
// JSON check MariaDB gives its JSON type: MySQL's JSON type would reorder
// keys and rewrite numbers.
func TestMigrationsKeepPayloadTextOnMySQL(t *testing.T) {
	for _, tc := range []struct {
		mariaDB bool
		want    string
	}{
		{true, "payload        JSON NOT NULL,"},
		{false, "payload        LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL CHECK (JSON_VALID(payload)),"},
	} {
		text := renderMigrations(t, tc.mariaDB)
		var payloads []string
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "payload ") {
				payloads = append(payloads, strings.Join(strings.Fields(line), " "))
			}
		}
		// The outbox table, the dead letters table and the history.
		if len(payloads) != 3 {
			t.Fatalf("mariaDB=%v: %d payload columns, want 3: %q", tc.mariaDB, len(payloads), payloads)
		}
		for _, p := range payloads {
			if p != strings.Join(strings.Fields(tc.want), " ") {
				t.Errorf("mariaDB=%v: payload column %q, want %q", tc.mariaDB, p, tc.want)
			}
		}
		if strings.Contains(text, "{{") {
			t.Errorf("mariaDB=%v: a template action was left in the migrations", tc.mariaDB)
		}
	}
}
