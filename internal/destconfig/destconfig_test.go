package destconfig

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/txoutbox/outbox"
)

// issueExample is the file of docs/DESTINATIONS.md's first example.
const issueExample = `destinations:
  gateway: { url: "https://gateway.example/approve?sign_secret_env=GW_SECRET" }
  events:  { url: "kafka://broker:9092" }
routes:
  - match: { event_type: ApprovalRequested }
    to: [gateway, events]
  - match: { aggregate_type: merchant }
    to: [events]
`

// gatewaySecret is a Standard Webhooks signing secret, as the http sink
// requires one.
const gatewaySecret = "whsec_c2VjcmV0LW9mLXRoZS1nYXRld2F5LWZvci10ZXN0cw=="

func mustParse(t *testing.T, text string) *Config {
	t.Helper()
	cfg, err := Parse("dest.yaml", []byte(text))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}

func TestParseValidFile(t *testing.T) {
	t.Setenv("GW_SECRET", gatewaySecret)
	cfg := mustParse(t, issueExample)
	if cfg.File != "dest.yaml" {
		t.Errorf("File = %q", cfg.File)
	}
	wantDest := []Destination{
		{Name: "gateway", URL: "https://gateway.example/approve?sign_secret_env=GW_SECRET", Line: 2},
		{Name: "events", URL: "kafka://broker:9092", Line: 3},
	}
	if !reflect.DeepEqual(cfg.Destinations, wantDest) {
		t.Errorf("Destinations = %+v\nwant %+v", cfg.Destinations, wantDest)
	}
	if len(cfg.Routes) != 2 || cfg.Routes[0].Line != 5 || cfg.Routes[1].Line != 7 {
		t.Fatalf("Routes = %+v, want two, on lines 5 and 7", cfg.Routes)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("Warnings = %v, want none", cfg.Warnings)
	}
	for _, c := range []struct {
		eventType, aggregateType string
		want                     []string
		ok                       bool
	}{
		{"ApprovalRequested", "payment", []string{"gateway", "events"}, true},
		{"MerchantUpdated", "merchant", []string{"events"}, true},
		{"ApprovalRequested", "merchant", []string{"gateway", "events"}, true},
		{"PaymentCaptured", "payment", nil, false},
	} {
		got, ok := cfg.Resolve(c.eventType, c.aggregateType)
		if ok != c.ok || !reflect.DeepEqual(got, c.want) {
			t.Errorf("Resolve(%q, %q) = %v, %v; want %v, %v", c.eventType, c.aggregateType, got, ok, c.want, c.ok)
		}
	}
}

func TestEveryURLSchemeOfSinkAccepted(t *testing.T) {
	cfg := mustParse(t, `destinations:
  web: { url: "http://hooks.example/in" }
  webs: { url: "https://hooks.example/in?timeout=5s&rate=100/s" }
  k: { url: "kafka://b1:9092,b2:9092?topic={aggregate_type}.events" }
  n: { url: "nats://nats:4222?subject=outbox.{aggregate_type}" }
  a: { url: "amqp://guest:guest@rabbit:5672/?exchange=outbox" }
  as: { url: "amqps://rabbit:5671/" }
  r: { url: "redis://redis:6379/0?stream={aggregate_type}" }
  rs: { url: "rediss://redis:6380/0" }
  out: { url: "stdout://" }
  none: { url: "discard://" }
routes:
  - match: {}
    to: [web, webs, k, n, a, as, r, rs, out, none]
`)
	if len(cfg.Destinations) != 10 {
		t.Errorf("%d destinations, want 10", len(cfg.Destinations))
	}
	if want := []string{"amqp", "amqps", "discard", "http", "https", "kafka", "nats", "redis", "rediss", "stdout"}; !reflect.DeepEqual(Schemes(), want) {
		t.Errorf("Schemes() = %v, want %v", Schemes(), want)
	}
}

func TestFirstMatchingRouteWins(t *testing.T) {
	cfg := mustParse(t, `destinations:
  a: { url: "discard://" }
  b: { url: "discard://" }
  c: { url: "discard://" }
routes:
  - match: { event_type: Payment* }
    to: [a]
  - match: { event_type: PaymentFailed }
    to: [b]
  - match: {}
    to: [c]
`)
	for et, want := range map[string]string{"PaymentFailed": "a", "PaymentCaptured": "a", "Refund": "c"} {
		if got, ok := cfg.Resolve(et, "payment"); !ok || len(got) != 1 || got[0] != want {
			t.Errorf("Resolve(%q) = %v, %v; want [%s]", et, got, ok, want)
		}
	}
}

func TestGlobsListsAndBothKeys(t *testing.T) {
	cfg := mustParse(t, `destinations:
  both: { url: "discard://" }
  listed: { url: "discard://" }
  globbed: { url: "discard://" }
routes:
  - match: { event_type: Approval*, aggregate_type: payment }
    to: [both]
  - match:
      event_type: [MerchantCreated, "Merchant?pdated"]
    to: [listed]
  - match: { aggregate_type: ["ledger.[a-c]*", exact] }
    to: [globbed]
`)
	for _, c := range []struct{ et, at, want string }{
		{"ApprovalRequested", "payment", "both"},
		{"ApprovalRequested", "merchant", ""}, // both keys must match
		{"Approval", "payment", "both"},
		{"MerchantCreated", "merchant", "listed"},
		{"MerchantUpdated", "x", "listed"},
		{"MerchantXXpdated", "x", ""},
		{"Any", "ledger.b1", "globbed"},
		{"Any", "ledger.d1", ""},
		{"Any", "exact", "globbed"},
		{"Any", "exactly", ""},
	} {
		got, ok := cfg.Resolve(c.et, c.at)
		if c.want == "" {
			if ok {
				t.Errorf("Resolve(%q, %q) = %v, want no route", c.et, c.at, got)
			}
			continue
		}
		if !ok || len(got) != 1 || got[0] != c.want {
			t.Errorf("Resolve(%q, %q) = %v, %v; want [%s]", c.et, c.at, got, ok, c.want)
		}
	}
	for i, want := range []string{"Approval*", "[MerchantCreated, Merchant?pdated]", "*any*"} {
		if got := cfg.Routes[i].EventType.String(); got != want {
			t.Errorf("route %d EventType.String() = %q, want %q", i+1, got, want)
		}
	}
	if got := cfg.Routes[1].EventType.Alternatives(); !reflect.DeepEqual(got, []string{"MerchantCreated", "Merchant?pdated"}) {
		t.Errorf("Alternatives() = %v", got)
	}
}

func TestGlobStarStopsAtSlash(t *testing.T) {
	cfg := mustParse(t, `destinations: { d: { url: "discard://" } }
routes:
  - match: { event_type: "*" }
    to: [d]
`)
	if _, ok := cfg.Resolve("a/b", "x"); ok {
		t.Error(`event_type "*" matched "a/b": path.Match's * does not cross '/', and the docs say so`)
	}
}

func TestCatchAllLastRoute(t *testing.T) {
	cfg := mustParse(t, `destinations: { d: { url: "discard://" }, e: { url: "discard://" } }
routes:
  - match: { event_type: A }
    to: [d]
  - match: {}
    to: [e]
`)
	if !cfg.Routes[1].CatchAll() || cfg.Routes[0].CatchAll() {
		t.Errorf("CatchAll() = %v, %v; want false, true", cfg.Routes[0].CatchAll(), cfg.Routes[1].CatchAll())
	}
	if got, ok := cfg.Resolve("a/b", ""); !ok || got[0] != "e" {
		t.Errorf("Resolve through match: {} = %v, %v; want [e]", got, ok)
	}
}

func TestAliasesAreFollowed(t *testing.T) {
	cfg := mustParse(t, `destinations:
  d: &kafka { url: "kafka://broker:9092" }
  e: *kafka
routes:
  - match: { event_type: &types [A, B] }
    to: &both [d, e]
  - match: { aggregate_type: *types }
    to: *both
`)
	if got, ok := cfg.Resolve("x", "B"); !ok || !reflect.DeepEqual(got, []string{"d", "e"}) {
		t.Errorf("Resolve = %v, %v", got, ok)
	}
	if cfg.Destinations[1].URL != "kafka://broker:9092" {
		t.Errorf("aliased destination URL = %q", cfg.Destinations[1].URL)
	}
}

func TestUnusedDestinationIsAWarning(t *testing.T) {
	cfg := mustParse(t, `destinations:
  used: { url: "discard://" }
  spare: { url: "discard://" }
routes:
  - match: {}
    to: [used]
`)
	want := []Problem{{File: "dest.yaml", Line: 3, Message: `destination "spare" is used by no route: no event will be delivered there; add it to a route's to: or remove it`}}
	if !reflect.DeepEqual(cfg.Warnings, want) {
		t.Errorf("Warnings = %+v\nwant %+v", cfg.Warnings, want)
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "destinations.yaml")
	if err := os.WriteFile(path, []byte("destinations: { d: { url: \"discard://\" } }\nroutes: [ { match: {}, to: [d] } ]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil || cfg.File != path {
		t.Fatalf("Load = %+v, %v", cfg, err)
	}
	_, err = Load(filepath.Join(t.TempDir(), "missing.yaml"))
	if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("Load(missing) = %v, want an invalid-configuration error naming the file", err)
	}
}

func TestCheckTypesNamesEveryUnmatchedPair(t *testing.T) {
	t.Setenv("GW_SECRET", gatewaySecret)
	cfg := mustParse(t, issueExample)
	types := []TypePair{
		{"ApprovalRequested", "payment"},
		{"PaymentCaptured", "payment"},
		{"MerchantUpdated", "merchant"},
		{"RefundIssued", "refund"},
	}
	err := cfg.CheckTypes(types)
	var ue *UnmatchedError
	if !errors.As(err, &ue) || !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Fatalf("CheckTypes = %v, want an *UnmatchedError matching ErrInvalidConfig", err)
	}
	if want := []TypePair{types[1], types[3]}; !reflect.DeepEqual(ue.Pairs, want) {
		t.Errorf("Pairs = %v, want %v", ue.Pairs, want)
	}
	msg := err.Error()
	for _, s := range []string{"dest.yaml", `event_type "PaymentCaptured", aggregate_type "payment"`,
		`event_type "RefundIssued", aggregate_type "refund"`, "match: {}"} {
		if !strings.Contains(msg, s) {
			t.Errorf("error %q does not contain %q", msg, s)
		}
	}
	if strings.Contains(msg, "MerchantUpdated") || strings.Contains(msg, "ApprovalRequested") {
		t.Errorf("error %q names a pair that has a route", msg)
	}
	if err := cfg.CheckTypes(types[:1]); err != nil {
		t.Errorf("CheckTypes(matched only) = %v", err)
	}
	if err := cfg.CheckTypes(nil); err != nil {
		t.Errorf("CheckTypes(nil) = %v", err)
	}
}

func TestDescribe(t *testing.T) {
	t.Setenv("GW_SECRET", gatewaySecret)
	cfg := mustParse(t, `destinations:
  gateway: { url: "https://gateway.example/approve?sign_secret_env=GW_SECRET" }
  events:  { url: "kafka://broker:9092" }
  audit:   { url: "discard://" }
routes:
  - match: { event_type: ApprovalRequested }
    to: [gateway, events]
  - match: { event_type: [A, B], aggregate_type: "m*" }
    to: [events]
`)
	got := cfg.Describe([]TypePair{{"ApprovalRequested", "payment"}, {"Other", "x"}})
	want := `destinations (dest.yaml):
  gateway  https://gateway.example/approve?sign_secret_env=GW_SECRET  (line 2; route 1)
  events   kafka://broker:9092  (line 3; route 1, 2)
  audit    discard://  (line 4; used by no route)
routes (the first that matches an event decides):
  1. event_type ApprovalRequested -> gateway, events  (line 6)
  2. event_type [A, B] and aggregate_type m* -> events  (line 8)
event types in the table:
  event_type "ApprovalRequested", aggregate_type "payment" -> gateway, events  (route 1)
  event_type "Other", aggregate_type "x" -> NO ROUTE: add a route for it, or a last route with match: {}
warnings:
  dest.yaml:4: destination "audit" is used by no route: no event will be delivered there; add it to a route's to: or remove it
`
	if got != want {
		t.Errorf("Describe =\n%s\nwant\n%s", got, want)
	}
	if got := cfg.Describe(nil); strings.Contains(got, "event types in the table") {
		t.Errorf("Describe(nil) has a section of types:\n%s", got)
	}
	if got := cfg.Describe([]TypePair{}); !strings.Contains(got, "event types in the table:\n  (none)\n") {
		t.Errorf("Describe(empty) does not say the table has none:\n%s", got)
	}
}

func TestSecretsNeverShown(t *testing.T) {
	t.Setenv("GW_SECRET", gatewaySecret)
	const file = `destinations:
  gateway: { url: "https://gateway.example/approve?sign_secret_env=GW_SECRET&token=tok-in-query-1" }
  rabbit: { url: "amqp://app:amqp-pass-word@rabbit:5672/?exchange=outbox" }
  cache: { url: "redis://:redis-pass-word@redis:6379/0" }
routes:
  - match: {}
    to: [gateway, rabbit, cache]
`
	secrets := []string{gatewaySecret, strings.TrimPrefix(gatewaySecret, "whsec_"), "tok-in-query-1", "amqp-pass-word", "redis-pass-word"}
	cfg := mustParse(t, file)
	plan := cfg.Describe([]TypePair{{"A", "b"}})
	for _, s := range secrets {
		if strings.Contains(plan, s) {
			t.Errorf("Describe shows the secret %q:\n%s", s, plan)
		}
	}
	if !strings.Contains(plan, "amqp://app:xxxxx@rabbit:5672/") || !strings.Contains(plan, "token=xxxxx") {
		t.Errorf("Describe does not show the masked URLs:\n%s", plan)
	}

	// The same URLs with a mistake each: the errors quote the URLs.
	bad := strings.NewReplacer(
		"&token=", "&timeout=soon&token=",
		"exchange=outbox", "exchange=outbox&no_such_option=1",
		"/0\"", "/0?no_such_option=1\"",
	).Replace(file)
	_, err := Parse("dest.yaml", []byte(bad))
	var fe *Error
	if !errors.As(err, &fe) || len(fe.Problems) != 3 {
		t.Fatalf("Parse(bad URLs) = %v, want three problems", err)
	}
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error shows the secret %q:\n%v", s, err)
		}
	}
}

func TestScrubMasksSecretsOfTheURL(t *testing.T) {
	t.Setenv("SIGN", "sign-value")
	raw := "amqp://u:p%40ss-word@h/?api_key=k-123&sign_secret_env=SIGN"
	got := scrub("quoted: p@ss-word p%40ss-word k-123 sign-value", urlSecrets(raw))
	if got != "quoted: xxxxx xxxxx xxxxx xxxxx" {
		t.Errorf("scrub = %q", got)
	}
	if s := urlSecrets("http://h/%zz"); s != nil {
		t.Errorf("urlSecrets(unparseable) = %v", s)
	}
}

// A sink parser that quoted a URL whole would not leak its secrets: the
// destinations file masks them in what the parser says.
func TestCheckURLMasksSecretsASinkParserQuotes(t *testing.T) {
	quoting := func(raw string) error { return errors.New("refused " + raw) }
	saved := urlCheckers["amqp"]
	urlCheckers["amqp"] = quoting
	t.Cleanup(func() { urlCheckers["amqp"] = saved })
	err := checkURL("amqp://app:amqp-pass-word@rabbit/?token=tok-value-1")
	if err == nil {
		t.Fatal("checkURL accepted what the parser refused")
	}
	if got, want := err.Error(), "refused amqp://app:xxxxx@rabbit/?token=xxxxx"; got != want {
		t.Errorf("checkURL = %q, want %q", got, want)
	}
}
