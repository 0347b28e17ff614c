package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// RunReceipts checks that the receipts of attempts (what the destination
// answered, Outcome.Receipt) are kept byte for byte and returned by
// Attempts: a retried and a failed attempt in their attempt rows, a
// delivery recorded on its row with it, and no receipt where the sink
// recorded none; and that an operator action that moves a delivery
// recorded on the row into the attempts table moves its receipt too.
func RunReceipts(t *testing.T, newHarness Factory) {
	t.Run("KeptWithEachAttempt", func(t *testing.T) {
		t.Parallel()
		testReceiptsKept(t, newHarness(t))
	})
	t.Run("MovedWithADeliveryIntoTheAttempts", func(t *testing.T) {
		t.Parallel()
		testReceiptMovedWithDelivery(t, newHarness(t))
	})
}

// receiptOf is a receipt as a sink encodes it, distinct per name.
func receiptOf(name string, status int) []byte {
	return fmt.Appendf(nil, `{"kind":"http","destination":"https://gateway.example/%s","answered_at":"2026-12-07T23:00:00.123456789Z",`+
		`"http":{"status":%d,"body_sha256":"%064x","body_bytes":2,"headers_sha256":"%064x"}}`, name, status, status, len(name))
}

func testReceiptsKept(t *testing.T, h *Harness) {
	ctx := context.Background()
	ids := Enqueue(t, h, PaymentEvent("retried", 1), PaymentEvent("delivered", 1), PaymentEvent("plain", 1), PaymentEvent("failed", 1))
	retried, delivered, plain, failed := ids[0], ids[1], ids[2], ids[3]
	c := claim(t, h.Store, 10, time.Minute, true)
	if len(c.Events) != 4 {
		t.Fatalf("claimed %d events, want 4", len(c.Events))
	}
	outs := outcomes(c, store.Delivered)
	for i := range outs {
		switch outs[i].EventID {
		case retried:
			outs[i].Kind, outs[i].Error, outs[i].Receipt = store.Retry, "status 503", receiptOf("retried", 503)
		case delivered:
			outs[i].Receipt = receiptOf("delivered", 200)
		case failed:
			outs[i].Kind, outs[i].Error, outs[i].Receipt = store.Failed, "status 400", receiptOf("failed", 400)
		}
	}
	if res := complete(t, h.Store, c, true, outs); len(res.Applied) != 4 {
		t.Fatalf("Complete = %+v, want all 4 applied", res)
	}
	// The retried event is delivered on its second attempt, with its
	// receipt, in a batch of deliveries alone where another has none.
	plain2 := Enqueue(t, h, PaymentEvent("plain-2", 1))[0]
	again := claim(t, h.Store, 10, time.Minute, true)
	if len(again.Events) != 2 {
		t.Fatalf("second claim = %+v, want the retried event and plain-2", again.Events)
	}
	outs = outcomes(again, store.Delivered)
	for i := range outs {
		if outs[i].EventID == retried {
			outs[i].Receipt = receiptOf("retried-again", 200)
		}
	}
	if res := complete(t, h.Store, again, true, outs); len(res.Applied) != 2 {
		t.Fatalf("second Complete = %+v", res)
	}
	want := map[outbox.EventID][]struct {
		outcome store.OutcomeKind
		receipt []byte
	}{
		retried:   {{store.Retry, receiptOf("retried", 503)}, {store.Delivered, receiptOf("retried-again", 200)}},
		delivered: {{store.Delivered, receiptOf("delivered", 200)}},
		plain:     {{store.Delivered, nil}},
		plain2:    {{store.Delivered, nil}},
		failed:    {{store.Failed, receiptOf("failed", 400)}},
	}
	for id, w := range want {
		atts, err := h.Store.Attempts(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(atts) != len(w) {
			t.Fatalf("event %s: %d attempts %+v, want %d", id, len(atts), atts, len(w))
		}
		for i, a := range atts {
			if a.Outcome != w[i].outcome || string(a.Receipt) != string(w[i].receipt) || (w[i].receipt == nil) != (a.Receipt == nil) {
				t.Errorf("event %s attempt %d: %s with receipt %q, want %s with %q", id, i+1, a.Outcome, a.Receipt, w[i].outcome, w[i].receipt)
			}
		}
	}
}

// testReceiptMovedWithDelivery: a delivery recorded on the event row
// (delivered_* columns, set here with plain SQL on a FAILED event, which an
// operator may requeue) moves into the attempts table with its receipt
// when the operator requeues the event, and leaves the row without one.
func testReceiptMovedWithDelivery(t *testing.T, h *Harness) {
	if h.SQL == nil {
		t.Skip("the harness has no SQL handle")
	}
	ctx := context.Background()
	bind := func(q string) string {
		if h.Bind != nil {
			return h.Bind(q)
		}
		return q
	}
	id := Enqueue(t, h, PaymentEvent("moved", 1))[0]
	c := claim(t, h.Store, 10, time.Minute, true)
	outs := outcomes(c, store.Failed)
	outs[0].Receipt = receiptOf("refused", 400)
	complete(t, h.Store, c, true, outs)
	onRow := receiptOf("on-row", 200)
	if _, err := h.SQL.ExecContext(ctx, bind(`UPDATE `+h.Table+` SET delivered_relay_id = 'relay-before', delivered_attempt = 1, delivered_token = '00000000-0000-4000-8000-0000000000bb',
		delivered_started_at = created_at, delivered_finished_at = created_at, delivered_receipt = ? WHERE event_id = ?`),
		string(onRow), id.String()); err != nil {
		t.Fatal(err)
	}
	receipts := func() map[store.OutcomeKind]string {
		t.Helper()
		atts, err := h.Store.Attempts(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		m := map[store.OutcomeKind]string{}
		for _, a := range atts {
			m[a.Outcome] = string(a.Receipt)
		}
		return m
	}
	want := map[store.OutcomeKind]string{store.Failed: string(receiptOf("refused", 400)), store.Delivered: string(onRow)}
	if got := receipts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("before the requeue: receipts %v, want %v", got, want)
	}
	if err := h.Store.Requeue(ctx, store.OperatorAction{EventID: id, Actor: "receipts", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	want[store.Requeued] = ""
	if got := receipts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the requeue: receipts %v, want %v", got, want)
	}
	var left, moved int
	if err := h.SQL.QueryRowContext(ctx, bind(`SELECT count(*) FROM `+h.Table+` WHERE event_id = ? AND delivered_receipt IS NOT NULL`),
		id.String()).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if err := h.SQL.QueryRowContext(ctx, bind(`SELECT count(*) FROM `+h.Table+`_attempts WHERE event_id = ? AND outcome = 'DELIVERED' AND receipt = ?`),
		id.String(), string(onRow)).Scan(&moved); err != nil {
		t.Fatal(err)
	}
	if left != 0 || moved != 1 {
		t.Fatalf("after the requeue: %d rows keep a delivered_receipt, %d attempt rows have it; want 0 and 1", left, moved)
	}
}
