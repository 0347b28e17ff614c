package sqlite_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store/sqlite"
)

func TestEnqueueCommitVisibleRollbackInvisible(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	ctx := context.Background()

	tx, err := e.app.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The application's business row and the event, in one transaction.
	if _, err := tx.ExecContext(ctx, `CREATE TABLE payments (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO payments VALUES ('tx-1')`); err != nil {
		t.Fatal(err)
	}
	ids, err := e.store.Enqueue(ctx, tx, ev("tx-1", 1))
	if err != nil {
		t.Fatal(err)
	}
	// Not visible to the relay before the commit.
	if c := e.claim(t, 10, time.Minute, true); len(c.Events) != 0 {
		t.Fatalf("claimed %d uncommitted events", len(c.Events))
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	tx, err = e.app.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Enqueue(ctx, tx, ev("tx-2", 1), ev("tx-2", 2)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}

	st := e.stats(t, true)
	if st.Counts[outbox.StatusPending] != 1 {
		t.Fatalf("pending = %d, want only the committed event", st.Counts[outbox.StatusPending])
	}
	c := e.claim(t, 10, time.Minute, true)
	if !sameIDs(eventIDs(c), ids) {
		t.Fatalf("claimed %v, want %v", eventIDs(c), ids)
	}
}

func TestEnqueueValidationWritesNothing(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	ctx := context.Background()
	cases := []struct {
		event outbox.Event
		field string
	}{
		{outbox.Event{AggregateType: "payment", AggregateID: "x", EventType: "E", Payload: []byte(`{"a":`)}, "payload"},
		{outbox.Event{AggregateType: "payment", EventType: "E", Payload: []byte(`{}`)}, "aggregate_id"},
		{outbox.Event{AggregateType: "payment", AggregateID: "x", EventType: "E", Payload: []byte(`{}`),
			Headers: map[string]string{"X-Trace": "a\r\nb"}}, "headers"},
		{outbox.Event{AggregateType: "payment", AggregateID: "x", EventType: "E", Payload: []byte(`"` + strings.Repeat("a", 20) + `"`)}, "payload"},
	}
	small, err := sqlite.New(e.app, sqlite.Config{Limits: outbox.Limits{MaxPayloadBytes: 20}})
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases {
		tx, err := e.app.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = small.Enqueue(ctx, tx, ev("good", 1), tc.event)
		var ie *outbox.InvalidEventError
		if !errors.Is(err, outbox.ErrInvalidEvent) || !errors.As(err, &ie) || ie.Index != 1 || ie.Field != tc.field {
			t.Errorf("case %d: err = %v, want an InvalidEventError for event #1 field %s", i, err, tc.field)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.store.WriteEvents(ctx, nil, []outbox.Event{ev("x", 1)}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("WriteEvents(nil tx) = %v, want ErrInvalidConfig", err)
	}
	// A duplicate event id (a retried business operation) fails the
	// statement; the caller's transaction decides.
	id := outbox.NewEventID()
	dup := ev("dup", 1)
	dup.ID = id
	e.enqueue(t, dup)
	tx, err := e.app.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Enqueue(ctx, tx, dup); err == nil || !strings.Contains(err.Error(), "UNIQUE") {
		t.Errorf("duplicate event id: %v, want a UNIQUE constraint error", err)
	}
	tx.Rollback()

	st := e.stats(t, true)
	var total int64
	for _, n := range st.Counts {
		total += n
	}
	if total != 1 {
		t.Fatalf("%d events written, want only the one valid committed event", total)
	}
}

func TestEnqueueFields(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	ctx := context.Background()
	before := e.dbNow(t)
	fixed := outbox.NewEventID()
	payload := `{"b": 2,  "a": [1, 2.50, "x"], "u": "ü\u00e9<>&"}`
	deadline := time.Date(2099, 1, 2, 3, 4, 5, 678_900_000, time.FixedZone("KST", 9*3600))
	notBefore := time.Now().Add(-time.Hour)
	ids := e.enqueue(t,
		outbox.Event{ID: fixed, AggregateType: "merchant", AggregateID: "m-7", EventType: "MerchantUpdated",
			Payload: json.RawMessage(payload), Headers: map[string]string{"traceparent": "00-abc-def-01", "X-Correlation-Id": "c1"},
			TTL: 66 * time.Second},
		outbox.Event{AggregateType: "merchant", AggregateID: "m-7", EventType: "Later", Payload: json.RawMessage(`{}`),
			Delay: time.Hour, ExpiresAt: deadline},
		outbox.Event{AggregateType: "merchant", AggregateID: "m-8", EventType: "Absolute", Payload: json.RawMessage(`[]`),
			AvailableAt: notBefore},
	)
	if ids[0] != fixed {
		t.Fatalf("id = %s, want the given %s", ids[0], fixed)
	}
	r := e.get(t, fixed)
	if string(r.Payload) != payload {
		t.Errorf("payload = %s, want byte for byte %s", r.Payload, payload)
	}
	if r.Headers["traceparent"] != "00-abc-def-01" || r.Headers["X-Correlation-Id"] != "c1" || len(r.Headers) != 2 {
		t.Errorf("headers = %v", r.Headers)
	}
	if r.Status != outbox.StatusPending || r.RetryCount != 0 || r.LockToken != "" || !r.LockedUntil.IsZero() || !r.ProcessedAt.IsZero() {
		t.Errorf("new record = %+v", r)
	}
	if r.CreatedAt.Location() != time.UTC || r.CreatedAt.Before(before) {
		t.Errorf("created_at = %v, want UTC at or after %v", r.CreatedAt, before)
	}
	if got := r.ExpiresAt.Sub(r.CreatedAt); got != 66*time.Second {
		t.Errorf("expires_at - created_at = %s, want the TTL 66s on the database clock", got)
	}
	if !r.AvailableAt.Equal(r.CreatedAt) {
		t.Errorf("available_at = %v, want created_at %v", r.AvailableAt, r.CreatedAt)
	}
	r2 := e.get(t, ids[1])
	if got := r2.AvailableAt.Sub(r2.CreatedAt); got != time.Hour {
		t.Errorf("delayed: available_at - created_at = %s, want 1h", got)
	}
	if !r2.ExpiresAt.Equal(deadline.Truncate(time.Millisecond)) {
		t.Errorf("absolute deadline = %v, want %v", r2.ExpiresAt, deadline.Truncate(time.Millisecond))
	}
	if r2.Headers != nil {
		t.Errorf("no headers: got %v", r2.Headers)
	}
	r3 := e.get(t, ids[2])
	if !r3.AvailableAt.Equal(notBefore.Truncate(time.Millisecond)) || !r3.ExpiresAt.IsZero() {
		t.Errorf("absolute available_at = %v (want %v), expires_at = %v", r3.AvailableAt, notBefore, r3.ExpiresAt)
	}
	if string(r3.Payload) != `[]` {
		t.Errorf("payload = %s", r3.Payload)
	}

	// The claim carries the same fields; the delayed event is not due.
	c := e.claim(t, 10, time.Minute, true)
	if len(c.Events) != 2 || c.Events[0].EventID != ids[0] || c.Events[1].EventID != ids[2] {
		t.Fatalf("claimed %v, want the first and third events", eventIDs(c))
	}
	m := c.Events[0]
	if string(m.Payload) != payload || m.Headers["traceparent"] != "00-abc-def-01" || m.Attempt != 1 ||
		!m.ExpiresAt.Equal(r.ExpiresAt) || !m.CreatedAt.Equal(r.CreatedAt) || m.Expired ||
		m.AggregateType != "merchant" || m.AggregateID != "m-7" || m.EventType != "MerchantUpdated" {
		t.Errorf("claimed event = %+v", m)
	}

	// Many events in one call (more than one INSERT statement).
	many := make([]outbox.Event, 2500)
	for i := range many {
		many[i] = ev("bulk", i)
	}
	got := e.enqueue(t, many...)
	if len(got) != len(many) {
		t.Fatalf("bulk enqueue returned %d ids", len(got))
	}
	recs, err := e.store.ListEvents(ctx, storeFilter("bulk", 1000))
	if err != nil || len(recs) != 1000 {
		t.Fatalf("list = %d, %v", len(recs), err)
	}
	if recs[0].EventID != got[len(got)-1] {
		t.Errorf("newest bulk event = %s, want the last enqueued %s", recs[0].EventID, got[len(got)-1])
	}
}
