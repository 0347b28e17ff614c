// Package sqltext renders the SQL of the store backends: their queries and
// their migrations are Go text/template texts in one syntax. Only
// identifiers and fixed fragments are templated ({{.Outbox}} between the
// dialect's identifier quotes, {{if}} around a fixed fragment); every value
// stays a bind parameter. The identifiers come from store.TablesFor, which
// admits only names that need no escaping, so quoting them is enough.
package sqltext

import (
	"bytes"
	"fmt"
	"text/template"
)

// Template is one parsed statement, for statements whose fixed fragments
// vary from call to call. Parse it once; Render is safe for concurrent use.
type Template struct {
	tpl *template.Template
}

// Parse parses text as a template named name. A missing field is an error
// when it renders, never an empty string.
func Parse(name, text string) (*Template, error) {
	tpl, err := template.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("sql %s: parse: %w", name, err)
	}
	return &Template{tpl: tpl}, nil
}

// MustParse is Parse for the statements fixed at compile time: a parse
// error there is a bug in the store, caught by its tests.
func MustParse(name, text string) *Template {
	t, err := Parse(name, text)
	if err != nil {
		panic(err)
	}
	return t
}

// Render executes the template with data.
func (t *Template) Render(data any) (string, error) {
	var buf bytes.Buffer
	if err := t.tpl.Execute(&buf, data); err != nil {
		return "", fmt.Errorf("sql %s: render: %w", t.tpl.Name(), err)
	}
	return buf.String(), nil
}

// MustRender renders a statement fixed at compile time with the table
// names, once, when a store is built. The names are validated before a
// store is built, so an error here is a bug in the store's SQL (a field
// that does not exist), caught by its tests.
func MustRender(text string, data any) string {
	s, err := MustParse("query", text).Render(data)
	if err != nil {
		panic(err)
	}
	return s
}

// Set is a file of named statements, each between {{define "name"}} and
// {{end}}; text outside them (comments) is never rendered. A statement
// may include another with {{template "name" .}}.
type Set struct {
	tpl *template.Template
}

// ParseSet parses a file of named statements.
func ParseSet(name, text string) (*Set, error) {
	tpl, err := template.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("sql %s: parse: %w", name, err)
	}
	return &Set{tpl: tpl}, nil
}

// MustParseSet is ParseSet for a file embedded at compile time.
func MustParseSet(name, text string) *Set {
	s, err := ParseSet(name, text)
	if err != nil {
		panic(err)
	}
	return s
}

// Render renders the statement name with data. It is safe for concurrent
// use.
func (s *Set) Render(name string, data any) (string, error) {
	var buf bytes.Buffer
	if err := s.tpl.ExecuteTemplate(&buf, name, data); err != nil {
		return "", fmt.Errorf("sql %s: render: %w", name, err)
	}
	return buf.String(), nil
}

// MustRender renders a statement whose data is fixed when a store is
// built (the table names): see the package MustRender.
func (s *Set) MustRender(name string, data any) string {
	out, err := s.Render(name, data)
	if err != nil {
		panic(err)
	}
	return out
}
