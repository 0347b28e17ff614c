package mysql

import (
	"strings"
	"testing"

	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store"
)

// The adoption adds the keys of outboxIndexes; migration 00001 must create
// exactly those, so that an adopted table and a migrated one match.
func TestMigrationRendersEveryOutboxIndex(t *testing.T) {
	raw, err := migrationsFS.ReadFile("migrations/00001_create_outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	n := migrationNames{Tables: store.Tables{Outbox: "ob", DeadLetters: "ob_dead_letters", Attempts: "ob_attempts", Migrations: "ob_schema_migrations"}}
	text, err := sqltext.MustParse("00001", string(raw)).Render(n)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range outboxIndexes {
		if got := strings.Count(text, "`ob_"+x.suffix+"`"); got != 1 {
			t.Errorf("migration 00001 names %s %d times, want once", x.name("ob"), got)
		}
	}
	if !strings.Contains(text, "CONSTRAINT `ob_event_id_key` UNIQUE (event_id),") ||
		!strings.Contains(text, "INDEX `ob_expiry_idx` (waiting_expires_at)\n)") {
		t.Errorf("migration 00001 renders its keys differently:\n%s", text)
	}
	if _, err := n.OutboxIndex("nope"); err == nil {
		t.Error("an unknown index rendered")
	}
}
