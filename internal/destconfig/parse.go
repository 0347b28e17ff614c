package destconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/txoutbox/outbox/store"
)

// The keys of each mapping of the file.
var (
	fileKeys        = []string{"destinations", "routes"}
	destinationKeys = []string{"url", "table"}
	routeKeys       = []string{"match", "to"}
	matchKeys       = []string{"event_type", "aggregate_type"}
)

// destinationName is what a destination may be called: the name will
// label metrics and rows, so it is kept plain.
var destinationName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$`)

// Parse reads and checks a destinations file; file names it in errors.
// A file with problems returns an [*Error] listing every one, each with
// the line to fix.
func Parse(file string, data []byte) (*Config, error) {
	p := &parser{file: file, defined: map[string]int{}}
	cfg := &Config{File: file}
	if root := p.document(data); root != nil {
		p.readRoot(root, cfg)
	}
	if len(p.problems) > 0 {
		sort.SliceStable(p.problems, func(i, j int) bool { return p.problems[i].Line < p.problems[j].Line })
		return nil, &Error{File: file, Problems: p.problems}
	}
	return cfg, nil
}

// parser collects the problems of one file.
type parser struct {
	file     string
	problems []Problem
	defined  map[string]int // destination name -> its line, bad URL or not
	refs     []destinationRef
}

// destinationRef is one name in a route's to: list.
type destinationRef struct {
	name  string
	line  int
	route string
}

// field is a key of a mapping and its value.
type field struct{ key, value *yaml.Node }

func (p *parser) fail(line int, format string, args ...any) {
	p.problems = append(p.problems, Problem{File: p.file, Line: line, Message: fmt.Sprintf(format, args...)})
}

// document parses the YAML and returns its root mapping, or nil after
// recording why there is none.
func (p *parser) document(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := decodeNode(dec, &doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.fail(1, "the file is empty: define destinations: and routes: (see docs/DESTINATIONS.md)")
		} else {
			p.yamlError(err)
		}
		return nil
	}
	var next yaml.Node
	if err := decodeNode(dec, &next); err == nil {
		p.fail(max(next.Line, 1), "a second YAML document begins here: keep destinations: and routes: in one document, without ---")
	} else if !errors.Is(err, io.EOF) {
		p.yamlError(err)
	}
	root := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
	if len(doc.Content) > 0 {
		root = deref(doc.Content[0])
	}
	switch {
	case isNull(root):
		p.fail(max(root.Line, 1), "the file is empty: define destinations: and routes: (see docs/DESTINATIONS.md)")
		return nil
	case root.Kind != yaml.MappingNode:
		p.fail(root.Line, "the file must be a mapping with the keys destinations: and routes: (see docs/DESTINATIONS.md)")
		return nil
	}
	return root
}

// decodeNode decodes the next document; a panic of the YAML parser is an
// error, so that no input stops the relay with a panic.
func decodeNode(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if recover() != nil {
			err = errors.New("yaml: the YAML parser could not read the file")
		}
	}()
	return dec.Decode(n)
}

// yamlLine finds the line in the YAML parser's syntax errors.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func (p *parser) yamlError(err error) {
	msg := err.Error()
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	msg = "not valid YAML: " + strings.TrimPrefix(msg, "yaml: ")
	if line > 0 {
		// The parser gives the line where the structure it was reading
		// began, or the line before it: the mistake is there or below.
		msg += " (on this line or below it: check the indentation and the closing brackets and quotes)"
	}
	p.fail(line, "%s", msg)
}

// readRoot reads the root mapping into cfg.
func (p *parser) readRoot(root *yaml.Node, cfg *Config) {
	f, _ := p.fields(root, "top level", fileKeys, "the file has only destinations: and routes:")
	if d, ok := f["destinations"]; ok {
		p.destinations(d.value, cfg)
	} else {
		p.fail(root.Line, `the file defines no destinations: add destinations:, e.g. destinations: { events: { url: "kafka://broker:9092" } }`)
	}
	if r, ok := f["routes"]; ok {
		cfg.RoutesLine = r.key.Line
		p.routes(r.value, cfg)
	} else {
		p.fail(root.Line, "the file has no routes: add routes:, e.g. routes: [ { match: {}, to: [events] } ]")
	}
	p.links(cfg)
}

// fields returns the keys of the mapping n, recording a problem for a
// key not in allowed (hint says which are) or given twice. ok is false
// when n is not a mapping; the caller says what it should be.
func (p *parser) fields(n *yaml.Node, what string, allowed []string, hint string) (map[string]field, bool) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		return nil, false
	}
	out := map[string]field{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		switch {
		case k.Kind != yaml.ScalarNode:
			p.fail(k.Line, "%s: a key must be a plain name: %s", what, hint)
		case !slices.Contains(allowed, k.Value):
			p.fail(k.Line, "%s: unknown key %s: %s", what, quote(k.Value), hint)
		default:
			if prev, dup := out[k.Value]; dup {
				p.fail(k.Line, "%s: %s: is given twice (first on line %d): keep one", what, k.Value, prev.key.Line)
				continue
			}
			out[k.Value] = field{key: k, value: v}
		}
	}
	return out, true
}

func (p *parser) destinations(n *yaml.Node, cfg *Config) {
	n = deref(n)
	if n.Kind != yaml.MappingNode || len(n.Content) == 0 {
		p.fail(n.Line, `destinations: must name at least one destination, e.g. destinations: { events: { url: "kafka://broker:9092" } }`)
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			p.fail(k.Line, "destinations: a destination's name must be a plain name such as gateway")
			continue
		}
		name := k.Value
		if first, dup := p.defined[name]; dup {
			p.fail(k.Line, "destination %s is defined twice (first on line %d): rename or remove one", quote(name), first)
			continue
		}
		p.defined[name] = k.Line
		if !destinationName.MatchString(name) {
			p.fail(k.Line, "destination name %s: use letters, digits, '_', '-' and '.' (at most 64, starting with a letter or digit)", quote(name))
		}
		what := "destination " + quote(name)
		d := Destination{Name: name, Line: k.Line}
		f, ok := p.fields(v, what, destinationKeys, "a destination has only url: and table:")
		if !ok {
			p.fail(v.Line, `%s must be a mapping with url:, e.g. %s: { url: "kafka://broker:9092" }`, what, name)
			continue
		}
		u, ok := f["url"]
		switch {
		case !ok:
			p.fail(k.Line, "%s has no url: add url: with a sink URL (%s)", what, schemeForms())
		case u.value.Kind != yaml.ScalarNode || isNull(u.value) || u.value.Value == "":
			p.fail(u.value.Line, `%s: url: must be a sink URL in quotes, e.g. url: "kafka://broker:9092"`, what)
		default:
			d.URL = u.value.Value
			if err := checkURL(d.URL); err != nil {
				p.fail(u.value.Line, "%s: url: %s", what, err)
			}
		}
		if t, ok := f["table"]; ok {
			if t.value.Kind != yaml.ScalarNode || isNull(t.value) || t.value.Value == "" {
				p.fail(t.value.Line, "%s: table: must be a table name such as payment_outbox_gateway", what)
			} else {
				d.Table, d.TableLine = t.value.Value, t.value.Line
				if err := store.ValidateTable(d.Table); err != nil {
					p.fail(t.value.Line, "%s: table: %s", what, err)
				}
			}
		}
		cfg.Destinations = append(cfg.Destinations, d)
	}
}

func (p *parser) routes(n *yaml.Node, cfg *Config) {
	n = deref(n)
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		p.fail(n.Line, "routes: must be a list of at least one route, e.g. routes: [ { match: { event_type: ApprovalRequested }, to: [gateway] } ]")
		return
	}
	for i, item := range n.Content {
		item = deref(item)
		where := "route " + strconv.Itoa(i+1)
		r := Route{Line: item.Line}
		f, ok := p.fields(item, where, routeKeys, "a route has only match: and to:")
		if !ok {
			p.fail(item.Line, "%s must be a mapping with match: and to:, e.g. - { match: { event_type: ApprovalRequested }, to: [gateway] }", where)
			continue
		}
		if m, ok := f["match"]; !ok {
			p.fail(item.Line, "%s has no match: add match: { event_type: ... } or, as the last route, match: {} for every other event", where)
		} else if p.match(m.value, where, &r) && r.CatchAll() && i < len(n.Content)-1 {
			p.fail(m.key.Line, "%s: match: {} takes every event, so the routes after it would never be used: make it the last route, or give it event_type: or aggregate_type:", where)
		}
		if t, ok := f["to"]; ok {
			r.To = p.to(t.value, where)
		} else {
			p.fail(item.Line, "%s has no to: add the destinations, e.g. to: [events]", where)
		}
		cfg.Routes = append(cfg.Routes, r)
	}
}

// match reads a route's match: into r; false if it has problems.
func (p *parser) match(n *yaml.Node, where string, r *Route) bool {
	before := len(p.problems)
	what := where + " match"
	f, ok := p.fields(n, what, matchKeys, "match: has only event_type: and aggregate_type:")
	if !ok {
		p.fail(n.Line, "%s: must be a mapping, e.g. match: { event_type: ApprovalRequested }, or match: {} for every event (as the last route)", what)
		return false
	}
	if e, ok := f["event_type"]; ok {
		r.EventType = p.pattern(e, what)
	}
	if a, ok := f["aggregate_type"]; ok {
		r.AggregateType = p.pattern(a, what)
	}
	return len(p.problems) == before
}

// pattern reads a value, a glob or a list of them.
func (p *parser) pattern(f field, what string) Pattern {
	key := f.key.Value
	v := f.value
	var items []*yaml.Node
	switch {
	case v.Kind == yaml.ScalarNode:
		items = []*yaml.Node{v}
	case v.Kind == yaml.SequenceNode && len(v.Content) > 0:
		items = v.Content
	case v.Kind == yaml.SequenceNode:
		p.fail(v.Line, "%s: %s: [] is an empty list: list at least one type, or leave %s: out to take any", what, key, key)
		return Pattern{}
	default:
		p.fail(v.Line, "%s: %s: must be a type, a glob such as Payment*, or a list of them", what, key)
		return Pattern{}
	}
	var alts []string
	for _, it := range items {
		it = deref(it)
		switch {
		case it.Kind != yaml.ScalarNode:
			p.fail(it.Line, "%s: %s: a list item must be a type or a glob, not a list or mapping", what, key)
		case isNull(it) || it.Value == "":
			p.fail(it.Line, "%s: %s: is empty: give a type, a glob such as Payment*, or a list; or leave %s: out to take any", what, key, key)
		case slices.Contains(alts, it.Value):
			p.fail(it.Line, "%s: %s: %s is listed twice: keep one", what, key, quote(it.Value))
		default:
			if _, err := path.Match(it.Value, ""); err != nil {
				p.fail(it.Line, `%s: %s: %s is a malformed glob (an unclosed [ or a trailing \): write \[ for a literal [`, what, key, quote(it.Value))
				continue
			}
			alts = append(alts, it.Value)
		}
	}
	return Pattern{alternatives: alts}
}

// to reads a route's list of destinations.
func (p *parser) to(n *yaml.Node, where string) []string {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		hint := "list at least one destination, e.g. to: [events]"
		if n.Kind == yaml.ScalarNode && !isNull(n) && n.Value != "" {
			hint = "write it as a list: to: [" + cut(n.Value, 64) + "]"
		}
		p.fail(n.Line, "%s: to: must be a list of destination names: %s", where, hint)
		return nil
	}
	var names []string
	for _, it := range n.Content {
		it = deref(it)
		switch {
		case it.Kind != yaml.ScalarNode || isNull(it) || it.Value == "":
			p.fail(it.Line, "%s: to: each item must be the name of a destination", where)
		case slices.Contains(names, it.Value):
			p.fail(it.Line, "%s: to: %s is listed twice: keep one", where, quote(it.Value))
		default:
			names = append(names, it.Value)
			p.refs = append(p.refs, destinationRef{name: it.Value, line: it.Line, route: where})
		}
	}
	return names
}

// links checks that every route goes to defined destinations, and warns
// of a destination no route uses.
func (p *parser) links(cfg *Config) {
	used := map[string]bool{}
	for _, ref := range p.refs {
		used[ref.name] = true
		// Without destinations there is one problem to report, not one per name.
		if _, ok := p.defined[ref.name]; !ok && len(p.defined) > 0 {
			p.fail(ref.line, "%s: to: %s is not a destination%s: define it under destinations: or fix the name", ref.route, quote(ref.name), definedNames(p.defined))
		}
	}
	for _, d := range cfg.Destinations {
		if !used[d.Name] {
			cfg.Warnings = append(cfg.Warnings, Problem{File: p.file, Line: d.Line,
				Message: "destination " + quote(d.Name) + " is used by no route: no event will be delivered there; add it to a route's to: or remove it"})
		}
	}
}

// definedNames lists the defined destinations for an error.
func definedNames(defined map[string]int) string {
	names := make([]string, 0, len(defined))
	for n := range defined {
		names = append(names, cut(n, 64))
	}
	sort.Strings(names)
	if len(names) > 10 {
		names = append(names[:10], "...")
	}
	return " (defined: " + strings.Join(names, ", ") + ")"
}

// deref follows aliases (*name) to the node they stand for.
func deref(n *yaml.Node) *yaml.Node {
	for range 8 {
		if n.Kind != yaml.AliasNode || n.Alias == nil {
			break
		}
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// quote quotes a value of the file for an error, cut to a readable length.
func quote(s string) string { return strconv.Quote(cut(s, 100)) }

// cut shortens s to at most n bytes, at a character boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
