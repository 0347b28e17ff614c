package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/relay/relaytest"
	"github.com/txoutbox/outbox/store/mysql"
)

// TestProducerSessionTimeZone: a producer whose session is at +09:00
// writes NOW() into the time columns, or leaves them out, or writes a
// deadline in its own zone. The table stores UTC, so the events are due at
// once (not 9 hours later) and the deadline is the intended instant; an
// Enqueue in the same session is not moved.
func TestProducerSessionTimeZone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{})
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "SET time_zone = '+09:00'"); err != nil {
		t.Fatal(err)
	}
	table := "`" + s.Table() + "`"
	for _, q := range []string{
		"INSERT INTO " + table + " (aggregate_type, aggregate_id, event_type, payload, created_at, available_at) VALUES ('payment', 'tz-now', 'E', '{}', NOW(6), NOW(6))",
		"INSERT INTO " + table + " (aggregate_type, aggregate_id, event_type, payload) VALUES ('payment', 'tz-omitted', 'E', '{}')",
		"INSERT INTO " + table + " (aggregate_type, aggregate_id, event_type, payload, created_at, expires_at) VALUES ('payment', 'tz-deadline', 'E', '{}', NOW(), NOW() + INTERVAL 1 HOUR)",
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// Enqueue in the same +09:00 session: its UTC times must stay as they are.
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Microsecond)
	ids, err := s.Enqueue(ctx, tx, outbox.Event{AggregateType: "payment", AggregateID: "tz-go", EventType: "E", Payload: []byte(`{}`), ExpiresAt: deadline})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	var skew float64 // seconds between the stored times and UTC now
	if err := db.QueryRowContext(ctx, "SELECT MAX(ABS(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), available_at))) / 1e6 FROM "+table+
		" WHERE aggregate_id IN ('tz-now', 'tz-omitted')").Scan(&skew); err != nil {
		t.Fatal(err)
	}
	if skew > 60 {
		t.Fatalf("available_at is %.0f s away from UTC now: the session's +09:00 was stored as if it were UTC", skew)
	}
	var toDeadline float64
	if err := db.QueryRowContext(ctx, "SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), expires_at) FROM "+table+
		" WHERE aggregate_id = 'tz-deadline'").Scan(&toDeadline); err != nil {
		t.Fatal(err)
	}
	if toDeadline < 3000 || toDeadline > 3600 {
		t.Fatalf("a deadline of NOW() + 1 hour at +09:00 is %.0f s away, want about 3600", toDeadline)
	}
	r, err := s.GetEvent(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if !r.ExpiresAt.Equal(deadline) {
		t.Fatalf("Enqueue's deadline in a +09:00 session stored as %s, want %s", r.ExpiresAt, deadline)
	}

	// A relay delivers them at once: all four within the drain.
	rec := &relaytest.Recorder{Name: "sink"}
	drainWith(t, s, rec)
	if got := len(rec.Deliveries()); got != 4 {
		t.Fatalf("delivered %d of the 4 events written at +09:00", got)
	}
}

// drainWith runs a relay on s into rec until nothing is due.
func drainWith(t *testing.T, s *mysql.Store, rec *relaytest.Recorder) {
	t.Helper()
	r, err := relay.New(relay.Config{Store: s, Sink: rec, RelayID: "tz", PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
}
