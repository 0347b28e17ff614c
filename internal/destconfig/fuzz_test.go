package destconfig

import (
	"errors"
	"slices"
	"testing"

	"github.com/txoutbox/outbox"
)

// FuzzParseDestinationsFile feeds any bytes to Parse: it never panics, a
// refused file is an ErrInvalidConfig with at least one problem, and an
// accepted file routes only to destinations it defines. Its seeds are in
// testdata/fuzz/FuzzParseDestinationsFile and run with the tests; .ci/run
// finds every func Fuzz of the module and fuzzes it for a short time.
func FuzzParseDestinationsFile(f *testing.F) {
	f.Add([]byte(issueExample))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) || len(fe.Problems) == 0 || !errors.Is(err, outbox.ErrInvalidConfig) {
				t.Fatalf("Parse error %v: want an *Error with problems", err)
			}
			_ = err.Error()
			return
		}
		if len(cfg.Destinations) == 0 || len(cfg.Routes) == 0 {
			t.Fatalf("accepted a file with %d destinations and %d routes", len(cfg.Destinations), len(cfg.Routes))
		}
		names := make([]string, 0, len(cfg.Destinations))
		for _, d := range cfg.Destinations {
			names = append(names, d.Name)
		}
		for i, r := range cfg.Routes {
			if len(r.To) == 0 {
				t.Fatalf("route %d accepted with no destination", i+1)
			}
			for _, to := range r.To {
				if !slices.Contains(names, to) {
					t.Fatalf("route %d goes to %q, which is not defined", i+1, to)
				}
			}
			if r.CatchAll() && i != len(cfg.Routes)-1 {
				t.Fatalf("route %d matches every event but is not the last", i+1)
			}
		}
		types := []TypePair{{"ApprovalRequested", "payment"}, {"", ""}, {"a/b", "[x"}}
		for _, tp := range types {
			if got, ok := cfg.Resolve(tp.EventType, tp.AggregateType); ok && len(got) == 0 {
				t.Fatalf("Resolve(%v) matched a route without destinations", tp)
			}
		}
		_ = cfg.CheckTypes(types)
		_ = cfg.Describe(types)
	})
}
