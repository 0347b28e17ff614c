package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/textlimit"
	"github.com/txoutbox/outbox/store"
)

// HostileTexts are error texts that databases refuse or that a naive cut
// breaks: a multi-byte script longer than every cut, NUL bytes, invalid
// UTF-8, a cut that lands inside a character, and 1 MB.
func HostileTexts() map[string]string {
	return map[string]string{
		"korean":    strings.Repeat("결제", 1500), // 3,000 characters, 9,000 bytes
		"nul":       "gateway said \x00 and then \x00\x00 more",
		"invalid":   "bad bytes \xff\xfe\xc3 here \xed\xa0\x80 (a surrogate)",
		"split":     strings.Repeat("a", 999) + "결제" + strings.Repeat("b", 2000),
		"megabyte":  strings.Repeat("x", 1<<20),
		"emoji-4b":  strings.Repeat("\U0001F4B3", 2500),
		"mixed-nul": strings.Repeat("결\x00\xff", 1500),
	}
}

// OutcomeFuzzKinds are the outcomes that store an error text, in the
// order FuzzOutcome picks them by its kind argument.
var OutcomeFuzzKinds = []store.OutcomeKind{store.Retry, store.Failed, store.Expired}

// FuzzOutcome is the body of each backend's FuzzOutcomeText: it claims a
// fresh event, completes it with the fuzzed error text as a RETRY, FAILED
// or EXPIRED outcome, and checks that the outcome was recorded (the event
// is not left PROCESSING) with the text as textlimit.ErrorText makes it, in
// last_error, the audit row and the dead letter. h must be a harness of
// its own: the fuzz target owns its table.
func FuzzOutcome(f *testing.F, h *Harness) {
	for _, text := range HostileTexts() {
		if len(text) > 16<<10 {
			continue // a big seed slows every mutation; the relay suite covers 1 MB
		}
		for k := range OutcomeFuzzKinds {
			f.Add(text, uint8(k))
		}
	}
	var seq atomic.Int64
	f.Fuzz(func(t *testing.T, text string, kind uint8) {
		ctx := context.Background()
		k := OutcomeFuzzKinds[int(kind)%len(OutcomeFuzzKinds)]
		id := Enqueue(t, h, PaymentEvent(fmt.Sprintf("fuzz-%d", seq.Add(1)), 1))[0]
		c, err := h.Store.Claim(ctx, store.ClaimRequest{RelayID: "fuzz", Limit: 10, Lease: time.Minute, FailedBlocks: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Events) != 1 || c.Events[0].EventID != id {
			t.Fatalf("claimed %d events, want the one just enqueued", len(c.Events))
		}
		o := store.Outcome{ID: c.Events[0].ID, EventID: id, Kind: k, Attempt: 1, Error: text,
			RetryIn: time.Hour, Attempted: true, StartedAt: c.DBTime, FinishedAt: c.DBTime}
		res, err := h.Store.Complete(ctx, store.CompleteRequest{Token: c.Token, RelayID: "fuzz", FailedBlocks: true,
			Outcomes: []store.Outcome{o}})
		if err != nil {
			t.Fatalf("Complete(%s) with error text %q: %v", k, text[:min(len(text), 120)], err)
		}
		if len(res.Applied) != 1 {
			t.Fatalf("Complete(%s): %+v, want the event applied", k, res)
		}
		want := textlimit.ErrorText(text)
		r, err := h.Store.GetEvent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus := map[store.OutcomeKind]outbox.Status{store.Retry: outbox.StatusPending,
			store.Failed: outbox.StatusFailed, store.Expired: outbox.StatusExpired}[k]
		if r.Status != wantStatus {
			t.Fatalf("after %s: status %s, want %s", k, r.Status, wantStatus)
		}
		if r.LastError != want {
			t.Fatalf("last_error = %q, want %q", r.LastError[:min(len(r.LastError), 120)], want[:min(len(want), 120)])
		}
		atts, err := h.Store.Attempts(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(atts) != 1 || atts[0].Error != want {
			t.Fatalf("audit rows %d, want 1 with the stored text", len(atts))
		}
		if k == store.Failed {
			dls, err := h.Store.DeadLetters(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			wantReason := want
			if wantReason == "" {
				wantReason = "failed"
			}
			if len(dls) != 1 || dls[0].EventID != id || dls[0].Reason != wantReason {
				t.Fatalf("dead letter %+v, want the event with the stored text", dls)
			}
		}
	})
}
