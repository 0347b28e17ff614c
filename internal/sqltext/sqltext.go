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
	"io/fs"
	"slices"
	"sort"
	"strings"
	"text/template"
)

// Template is one parsed text: a statement, a migration, or a file of
// named statements, each between {{define "name"}} and {{end}} (text
// outside them, such as comments, is never rendered by RenderNamed; a
// statement may include another with {{template "name" .}}). Parse it
// once; rendering is safe for concurrent use.
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

// MustParse is Parse for the texts fixed at compile time: a parse error
// there is a bug in the store, caught by its tests.
func MustParse(name, text string) *Template {
	t, err := Parse(name, text)
	if err != nil {
		panic(err)
	}
	return t
}

// Render renders the whole text with data.
func (t *Template) Render(data any) (string, error) {
	return t.render(t.tpl.Name(), data)
}

// RenderNamed renders the statement defined as name with data.
func (t *Template) RenderNamed(name string, data any) (string, error) {
	return t.render(name, data)
}

// MustRenderNamed renders a named statement whose data is fixed when a
// store is built (the table names): see MustRender.
func (t *Template) MustRenderNamed(name string, data any) string {
	out, err := t.render(name, data)
	if err != nil {
		panic(err)
	}
	return out
}

func (t *Template) render(name string, data any) (string, error) {
	var buf bytes.Buffer
	if err := t.tpl.ExecuteTemplate(&buf, name, data); err != nil {
		return "", fmt.Errorf("sql %s: render: %w", name, err)
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

// ParseFS parses the files of fsys that match patterns (a backend's
// sql/*.sql, embedded) into one template set of named statements. Every
// statement is defined once across the files: a name defined in two files
// (or twice in one) is an error, where text/template would let the last
// definition win in silence.
func ParseFS(fsys fs.FS, patterns ...string) (*Template, error) {
	pattern := strings.Join(patterns, " ")
	var files []string
	for _, p := range patterns {
		matched, err := fs.Glob(fsys, p)
		if err != nil {
			return nil, fmt.Errorf("sql %s: %w", p, err)
		}
		if len(matched) == 0 {
			return nil, fmt.Errorf("sql %s: no file matches", p)
		}
		files = append(files, matched...)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("sql: no pattern")
	}
	sort.Strings(files)
	files = slices.Compact(files)
	set := template.New(pattern).Option("missingkey=error")
	definedIn := map[string]string{}
	for _, name := range files {
		text, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("sql %s: %w", name, err)
		}
		one, err := template.New(name).Parse(string(text))
		if err != nil {
			return nil, fmt.Errorf("sql %s: parse: %w", name, err)
		}
		for _, t := range one.Templates() {
			if t.Name() == name || t.Tree == nil {
				continue // the file itself: only its {{define}} blocks render
			}
			if prev, ok := definedIn[t.Name()]; ok {
				return nil, fmt.Errorf("sql %s: statement %q is defined again (first in %s)", name, t.Name(), prev)
			}
			definedIn[t.Name()] = name
			if _, err := set.AddParseTree(t.Name(), t.Tree); err != nil {
				return nil, fmt.Errorf("sql %s: %s: %w", name, t.Name(), err)
			}
		}
	}
	return &Template{tpl: set}, nil
}

// MustParseFS is ParseFS for files embedded at compile time: an error
// there is a bug in the store, caught by its tests.
func MustParseFS(fsys fs.FS, patterns ...string) *Template {
	t, err := ParseFS(fsys, patterns...)
	if err != nil {
		panic(err)
	}
	return t
}

// Names returns the names of the statements defined in t, sorted.
func (t *Template) Names() []string {
	var names []string
	for _, one := range t.tpl.Templates() {
		if one.Tree != nil && one.Name() != t.tpl.Name() {
			names = append(names, one.Name())
		}
	}
	sort.Strings(names)
	return names
}
