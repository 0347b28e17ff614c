package destconfig

import (
	"errors"
	"strings"
	"testing"
)

func TestTablesDefaultAndGiven(t *testing.T) {
	cfg, err := Parse("f.yaml", []byte(`destinations:
  gateway: { url: "http://gw.example/a" }
  Ledger.EU-1: { url: "kafka://b:9092" }
  audit: { url: "kafka://b:9092", table: payments_audit }
routes:
  - match: {}
    to: [gateway, Ledger.EU-1, audit]
`))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := cfg.Tables("outbox_events")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"gateway": "outbox_events_to_gateway", "Ledger.EU-1": "outbox_events_to_ledger_eu_1", "audit": "payments_audit"}
	for name, table := range want {
		if tables[name] != table {
			t.Errorf("destination %s: table %q, want %q", name, tables[name], table)
		}
	}
}

func TestTablesRefusedNameTheLine(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
	}{
		{"shared", `destinations:
  a.b: { url: "http://gw.example/a" }
  a_b: { url: "http://gw.example/b" }
routes:
  - match: {}
    to: [a.b, a_b]
`, "f.yaml:3: destination \"a_b\": its default table outbox_events_to_a_b is also the table of destination \"a.b\" (line 2)"},
		{"outbox's own", `destinations:
  gw: { url: "http://gw.example/a", table: outbox_events_lanes }
routes:
  - match: {}
    to: [gw]
`, "f.yaml:2: destination \"gw\": its table: outbox_events_lanes is or may become a table of the outbox outbox_events itself"},
		{"the outbox", `destinations:
  gw: { url: "http://gw.example/a", table: outbox_events }
routes:
  - match: {}
    to: [gw]
`, "f.yaml:2: destination \"gw\": its table: outbox_events is or may become a table of the outbox"},
		{"too long", `destinations:
  a_destination_with_a_long_name: { url: "http://gw.example/a" }
routes:
  - match: {}
    to: [a_destination_with_a_long_name]
`, "f.yaml:2: destination \"a_destination_with_a_long_name\": its default table outbox_events_to_a_destination_with_a_long_name is too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("f.yaml", []byte(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			_, err = cfg.Tables("outbox_events")
			var fe *Error
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Tables: %v\nwant an *Error containing %q", err, tc.want)
			}
		})
	}
}

func TestTableKeyRefusedWhenNotATableName(t *testing.T) {
	_, err := Parse("f.yaml", []byte(`destinations:
  gw: { url: "http://gw.example/a", table: "Bad-Name" }
routes:
  - match: {}
    to: [gw]
`))
	if err == nil || !strings.Contains(err.Error(), `f.yaml:2: destination "gw": table: `) {
		t.Fatalf("Parse: %v, want the table: refused on line 2", err)
	}
}
