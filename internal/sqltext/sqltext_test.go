package sqltext

import (
	"strings"
	"testing"
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
