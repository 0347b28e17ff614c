package relay

import (
	"errors"
	"strings"
	"testing"

	"github.com/txoutbox/outbox/store"
)

type nilPointerError struct{ msg string }

func (e *nilPointerError) Error() string { return e.msg } // panics on a nil *nilPointerError

// TestSafeResults: a sink's error whose Error method panics (a typed nil
// pointer returned as an error) becomes a plain error that says so, and
// the other results are kept as they are.
func TestSafeResults(t *testing.T) {
	var typedNil *nilPointerError
	ok := errors.New("HTTP 503")
	results := safeResults([]error{nil, ok, typedNil})
	if results[0] != nil || results[1] != ok {
		t.Fatalf("results changed: %v", results)
	}
	if results[2] == nil || !strings.Contains(results[2].Error(), "*relay.nilPointerError whose Error method panicked") {
		t.Fatalf("typed nil error became %v", results[2])
	}
	if got := sinkErrorText(typedNil); !strings.Contains(got, "panicked") {
		t.Errorf("sinkErrorText = %q", got)
	}
}

// TestRefusedOutcomes: the FAILED outcomes that replace a refused one keep
// its identity and attempt, and go from a reason that names the original
// outcome and the database's error to none.
func TestRefusedOutcomes(t *testing.T) {
	orig := store.Outcome{ID: 7, Kind: store.Retry, Attempt: 3, Error: "HTTP 503", Attempted: true}
	outs := refusedOutcomes(orig, errors.New("value too long \x00"))
	if len(outs) != 3 {
		t.Fatalf("%d outcomes", len(outs))
	}
	for _, o := range outs {
		if o.ID != 7 || o.Kind != store.Failed || o.Attempt != 3 || !o.Attempted {
			t.Errorf("replacement %+v", o)
		}
	}
	if !strings.Contains(outs[0].Error, "(RETRY): value too long \\x00;") || outs[1].Error == "" || outs[2].Error != "" {
		t.Errorf("reasons %q, %q, %q", outs[0].Error, outs[1].Error, outs[2].Error)
	}
}
