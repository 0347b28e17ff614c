package sqltext

import (
	"strings"
	"testing"
	"testing/fstest"
)

type names struct {
	Outbox string
	Limit  int
}

func TestRenderFillsIdentifiersAndFragments(t *testing.T) {
	got := MustRender(`SELECT id FROM "{{.Outbox}}" LIMIT {{.Limit}}`, names{Outbox: "payment_outbox", Limit: 10})
	if want := `SELECT id FROM "payment_outbox" LIMIT 10`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestRenderRefusesAMissingField(t *testing.T) {
	tpl := MustParse("q", `SELECT id FROM "{{.Attempts}}"`)
	_, err := tpl.Render(names{Outbox: "o"})
	if err == nil || !strings.Contains(err.Error(), "sql q: render") {
		t.Fatalf("err = %v, want a render error naming the statement", err)
	}
	_, err = tpl.Render(map[string]any{"Outbox": "o"})
	if err == nil {
		t.Fatal("a missing map key rendered")
	}
}

func TestParseRefusesBadSyntax(t *testing.T) {
	if _, err := Parse("q", `SELECT {{.Outbox`); err == nil || !strings.Contains(err.Error(), "sql q: parse") {
		t.Fatalf("err = %v, want a parse error naming the statement", err)
	}
}

func TestSetRendersNamedStatementsOnly(t *testing.T) {
	set := MustParse("queries.sql", `-- a comment, never rendered
{{define "window"}}SELECT id FROM "{{.Outbox}}" LIMIT {{.Limit}}{{end}}

-- another
{{define "union"}}({{template "window" .}}) UNION ALL (SELECT 1){{end}}
`)
	got, err := set.RenderNamed("union", names{Outbox: "o", Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if want := `(SELECT id FROM "o" LIMIT 3) UNION ALL (SELECT 1)`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if _, err := set.RenderNamed("nope", names{}); err == nil {
		t.Fatal("an unknown statement rendered")
	}
}

func TestParseFSJoinsFilesAndRefusesADefinitionTwice(t *testing.T) {
	fsys := fstest.MapFS{
		"sql/claim.sql": {Data: []byte(`-- the claim
{{define "claim.read"}}SELECT id FROM {{.Outbox}} WHERE {{template "common.due" .}}{{end}}`)},
		"sql/common.sql": {Data: []byte(`{{define "common.due"}}available_at <= now(){{end}}`)},
		"sql/notsql.txt": {Data: []byte(`{{define "claim.read"}}ignored{{end}}`)},
	}
	set, err := ParseFS(fsys, "sql/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	got, err := set.RenderNamed("claim.read", map[string]string{"Outbox": "ev"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "SELECT id FROM ev WHERE available_at <= now()"; got != want {
		t.Errorf("claim.read = %q, want %q", got, want)
	}
	if names := strings.Join(set.Names(), ","); names != "claim.read,common.due" {
		t.Errorf("Names() = %s", names)
	}
	if _, err := set.RenderNamed("claim.read", map[string]string{}); err == nil {
		t.Error("a missing field rendered")
	}
	fsys["sql/sweep.sql"] = &fstest.MapFile{Data: []byte(`{{define "claim.read"}}SELECT 1{{end}}`)}
	if _, err := ParseFS(fsys, "sql/*.sql"); err == nil || !strings.Contains(err.Error(), `"claim.read" is defined again (first in sql/claim.sql)`) {
		t.Errorf("a statement defined in two files: err = %v", err)
	}
	if _, err := ParseFS(fsys, "none/*.sql"); err == nil {
		t.Error("a pattern that matches no file parsed")
	}
	delete(fsys, "sql/sweep.sql")
	fsys["queries.sql"] = &fstest.MapFile{Data: []byte(`{{define "complete.lock"}}SELECT 2{{end}}`)}
	both, err := ParseFS(fsys, "sql/*.sql", "queries.sql")
	if err != nil {
		t.Fatal(err)
	}
	if names := strings.Join(both.Names(), ","); names != "claim.read,common.due,complete.lock" {
		t.Errorf("two patterns: Names() = %s", names)
	}
	if _, err := ParseFS(fsys, "sql/*.sql", "none.sql"); err == nil {
		t.Error("a second pattern that matches no file parsed")
	}
}
