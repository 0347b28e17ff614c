package destconfig

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/txoutbox/outbox"
)

// validRoutes completes a file whose test is about its destinations.
const validRoutes = "routes:\n  - match: {}\n    to: [d]\n"

// TestEachRefusalNamesItsLine checks every refusal: the file is refused
// with one problem, on the line to fix, saying what to change.
func TestEachRefusalNamesItsLine(t *testing.T) {
	cases := []struct {
		name string
		file string
		line int
		want []string // substrings of the message
	}{
		{"unknown top-level key", "destinations: { d: { url: \"discard://\" } }\n" + validRoutes + "sinks: []\n",
			5, []string{`unknown key "sinks"`, "only destinations: and routes:"}},
		{"unknown destination key", "destinations:\n  d:\n    url: \"discard://\"\n    topic: x\n" + validRoutes,
			4, []string{`destination "d": unknown key "topic"`, "only url:"}},
		{"unknown route key", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - match: {}\n    to: [d]\n    retries: 3\n",
			5, []string{`route 1: unknown key "retries"`, "only match: and to:"}},
		{"unknown match key", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - match: { event_type: A, aggregate_id: x }\n    to: [d]\n  - match: {}\n    to: [d]\n",
			3, []string{`route 1 match: unknown key "aggregate_id"`, "only event_type: and aggregate_type:"}},
		{"route to an undefined destination", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - match: {}\n    to: [d,\n      gatewy]\n",
			5, []string{`route 1: to: "gatewy" is not a destination (defined: d)`, "define it under destinations: or fix the name"}},
		{"duplicate destination", "destinations:\n  d: { url: \"discard://\" }\n  d: { url: \"stdout://\" }\n" + validRoutes,
			3, []string{`destination "d" is defined twice (first on line 2)`, "rename or remove one"}},
		{"bad destination name", "destinations:\n  d: { url: \"discard://\" }\n  \"a b\": { url: \"discard://\" }\nroutes:\n  - match: {}\n    to: [d, \"a b\"]\n",
			3, []string{`destination name "a b"`, "use letters, digits"}},
		{"destination without url", "destinations:\n  d: {}\n" + validRoutes,
			2, []string{`destination "d" has no url`, "kafka://"}},
		{"destination url not a string", "destinations:\n  d: { url: [a] }\n" + validRoutes,
			2, []string{`destination "d": url: must be a sink URL in quotes`}},
		{"destination not a mapping", "destinations:\n  d: \"kafka://b\"\n" + validRoutes,
			2, []string{`destination "d" must be a mapping with url:`, `d: { url: "kafka://broker:9092" }`}},
		{"unsupported scheme", "destinations:\n  d: { url: \"ftp://files\" }\n" + validRoutes,
			2, []string{`the scheme "ftp" is not supported`, "kafka://"}},
		{"URL without scheme", "destinations:\n  d: { url: \"broker:9092\" }\n" + validRoutes,
			2, []string{`the scheme "broker" is not supported`}},
		{"URL that does not parse", "destinations:\n  d: { url: \"http://h/%zz\" }\n" + validRoutes,
			2, []string{"not a valid URL", "percent-encode"}},
		{"bad option of the sink", "destinations:\n  d: { url: \"kafka://broker:9092?linger=soon\" }\n" + validRoutes,
			2, []string{`destination "d": url: kafka sink`, "linger"}},
		{"bad limit option", "destinations:\n  d: { url: \"nats://n:4222?rate=fast\" }\n" + validRoutes,
			2, []string{`destination "d": url:`, `rate "fast"`}},
		{"signing secret variable unset", "destinations:\n  d: { url: \"https://h/x?sign_secret_env=DESTCONFIG_TEST_UNSET\" }\n" + validRoutes,
			2, []string{"DESTCONFIG_TEST_UNSET is unset or empty"}},
		{"no destinations", validRoutes,
			1, []string{"defines no destinations", "destinations:"}},
		{"empty destinations", "destinations: {}\n" + validRoutes,
			1, []string{"destinations: must name at least one destination"}},
		{"no routes", "destinations: { d: { url: \"discard://\" } }\n",
			1, []string{"has no routes", "routes:"}},
		{"empty routes", "destinations: { d: { url: \"discard://\" } }\nroutes: []\n",
			2, []string{"routes: must be a list of at least one route"}},
		{"route not a mapping", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - [d]\n",
			3, []string{"route 1 must be a mapping with match: and to:"}},
		{"empty to", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - match: {}\n    to: []\n",
			4, []string{"route 1: to: must be a list of destination names", "list at least one destination"}},
		{"to not a list", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - match: {}\n    to: d\n",
			4, []string{"write it as a list: to: [d]"}},
		{"to listed twice", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - match: {}\n    to: [d, d]\n",
			4, []string{`to: "d" is listed twice`}},
		{"route without to", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - match: {}\n",
			3, []string{"route 1 has no to:", "to: [events]"}},
		{"route without match", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - to: [d]\n",
			3, []string{"route 1 has no match:", "match: {}"}},
		{"empty match before the last route", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - match: {}\n    to: [d]\n  - match: { event_type: A }\n    to: [d]\n",
			3, []string{"route 1: match: {} takes every event", "make it the last route"}},
		{"match left empty", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - match:\n    to: [d]\n",
			3, []string{"route 1 match: must be a mapping", "match: {}"}},
		{"empty event_type", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - match: { event_type: \"\" }\n    to: [d]\n",
			3, []string{"route 1 match: event_type: is empty", "leave event_type: out"}},
		{"empty list of types", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - match:\n      aggregate_type: []\n    to: [d]\n",
			4, []string{"aggregate_type: [] is an empty list"}},
		{"type listed twice", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - match:\n      event_type:\n        - A\n        - A\n    to: [d]\n",
			6, []string{`event_type: "A" is listed twice`}},
		{"type that is a mapping", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - match: { event_type: { a: b } }\n    to: [d]\n",
			3, []string{"event_type: must be a type, a glob"}},
		{"malformed glob", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - match: { event_type: \"Pay[ment\" }\n    to: [d]\n",
			3, []string{`"Pay[ment" is a malformed glob`, `\[`}},
		{"key given twice", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - match: {}\n    to: [d]\nroutes: []\n",
			5, []string{"routes: is given twice (first on line 2)"}},
		{"empty file", "", 1, []string{"the file is empty"}},
		{"only comments", "# destinations to come\n", 1, []string{"the file is empty"}},
		{"not a mapping", "- a\n- b\n", 1, []string{"must be a mapping with the keys destinations: and routes:"}},
		{"second document", "destinations: { d: { url: \"discard://\" } }\n" + validRoutes + "---\nroutes: []\n",
			5, []string{"a second YAML document"}},
		{"URL with no scheme", "destinations:\n  d: { url: \"//broker:9092\" }\n" + validRoutes,
			2, []string{`"//broker:9092" has no scheme`}},
		{"destination name not a plain name", "destinations:\n  d: { url: \"discard://\" }\n  ? [x]\n  : { url: \"discard://\" }\n" + validRoutes,
			3, []string{"a destination's name must be a plain name"}},
		{"key not a plain name", "destinations: { d: { url: \"discard://\" } }\n" + validRoutes + "? { a: b }\n: 1\n",
			5, []string{"top level: a key must be a plain name"}},
		{"type list item a list", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - match: { event_type: [A, [B]] }\n    to: [d]\n",
			3, []string{"event_type: a list item must be a type or a glob"}},
		{"to item a mapping", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - match: {}\n    to: [d, { e: 1 }]\n",
			4, []string{"route 1: to: each item must be the name of a destination"}},
		{"long names cut", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - match: {}\n    to: [d, x" + strings.Repeat("\u00e9", 60) + "]\n",
			4, []string{`"x` + strings.Repeat("\u00e9", 49) + `..." is not a destination`}},
		{"the file a lone document marker", "---\n", 2, []string{"the file is empty"}},
		{"second document not valid YAML", "destinations: { d: { url: \"discard://\" } }\n" + validRoutes + "---\n\tx\n",
			6, []string{"not valid YAML"}},
		{"YAML syntax with no line", "\tdestinations: {}\n", 0, []string{"not valid YAML: found character that cannot start any token"}},
		{"YAML syntax", "destinations: { d: { url: \"discard://\" } }\nroutes:\n  - match: {}\n   to: [d]\n",
			2, []string{"not valid YAML", "on this line or below it"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("dest.yaml", []byte(c.file))
			var fe *Error
			if !errors.As(err, &fe) || !errors.Is(err, outbox.ErrInvalidConfig) {
				t.Fatalf("Parse = %v, want an *Error matching ErrInvalidConfig", err)
			}
			if len(fe.Problems) != 1 {
				t.Fatalf("%d problems, want 1:\n%v", len(fe.Problems), err)
			}
			p := fe.Problems[0]
			if p.File != "dest.yaml" || p.Line != c.line {
				t.Errorf("problem at %s:%d, want dest.yaml:%d: %s", p.File, p.Line, c.line, p.Message)
			}
			for _, w := range c.want {
				if !strings.Contains(p.Message, w) {
					t.Errorf("message %q does not contain %q", p.Message, w)
				}
			}
			prefix := "destinations file dest.yaml: "
			if c.line > 0 {
				prefix = fmt.Sprintf("destinations file dest.yaml:%d: ", c.line)
			}
			if !strings.Contains(err.Error(), prefix) {
				t.Errorf("error %q does not contain %q", err, prefix)
			}
		})
	}
}

func TestEveryProblemReportedInLineOrder(t *testing.T) {
	file := `routes:
  - match: { event_type: A, colour: red }
    to: [ghost]
destinations:
  d: { url: "kafka://b?linger=soon" }
extra: true
`
	_, err := Parse("dest.yaml", []byte(file))
	var fe *Error
	if !errors.As(err, &fe) {
		t.Fatalf("Parse = %v, want an *Error", err)
	}
	var lines []int
	for _, p := range fe.Problems {
		lines = append(lines, p.Line)
	}
	if want := []int{2, 3, 5, 6}; !reflect.DeepEqual(lines, want) {
		t.Errorf("problems on lines %v, want %v:\n%v", lines, want, err)
	}
	if !strings.HasPrefix(err.Error(), "outbox: invalid configuration: destinations file dest.yaml has 4 problems to fix:\n  dest.yaml:2: ") {
		t.Errorf("error begins %q", err)
	}
}

func TestAnUndefinedNameIsNotReportedForADestinationWithABadURL(t *testing.T) {
	_, err := Parse("dest.yaml", []byte("destinations:\n  d: { url: \"ftp://x\" }\n"+validRoutes))
	var fe *Error
	if !errors.As(err, &fe) || len(fe.Problems) != 1 || fe.Problems[0].Line != 2 {
		t.Errorf("Parse = %v, want one problem, the URL on line 2", err)
	}
}

func TestUndefinedDestinationListsTenDefinedNames(t *testing.T) {
	var b strings.Builder
	b.WriteString("destinations:\n")
	for i := range 12 {
		fmt.Fprintf(&b, "  d%02d: { url: \"discard://\" }\n", i)
	}
	b.WriteString("routes:\n  - match: {}\n    to: [d00, d01, d02, d03, d04, d05, d06, d07, d08, d09, d10, d11, nope]\n")
	_, err := Parse("dest.yaml", []byte(b.String()))
	want := `"nope" is not a destination (defined: d00, d01, d02, d03, d04, d05, d06, d07, d08, d09, ...)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Parse = %v, want it to contain %s", err, want)
	}
}
