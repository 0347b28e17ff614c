package redissink_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/redissink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

func newSink(t *testing.T, cfg redissink.Config) *redissink.Sink {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	s, err := redissink.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestEntryLayout checks the fields a consumer sees, in order: the
// outbox-* fields, payload, then the event's own headers, with a header
// named payload renamed.
func TestEntryLayout(t *testing.T) {
	t.Parallel()
	addr, db := sharedRedis(t)
	prefix := uniquePrefix(t)
	c := newClient(t, addr, db)
	dropPrefix(t, c, prefix)
	s := newSink(t, redissink.Config{Addr: addr, DB: db, Route: prefix + ".{aggregate_type}.events"})

	m := sinktest.Message("tx-1", 0)
	m.Headers = map[string]string{"traceparent": "00-abc-def-01", "payload": "a header, not the payload"}
	if err := s.Publish(testCtx(t), []outbox.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	raw, err := c.Do(testCtx(t), "XRANGE", prefix+".payment.events", "-", "+").Slice()
	if err != nil || len(raw) != 1 {
		t.Fatalf("XRANGE: %v, %v", raw, err)
	}
	entry := raw[0].([]any)
	var kv []string
	for _, f := range entry[1].([]any) {
		kv = append(kv, f.(string))
	}
	want := []string{
		sink.HeaderEventID, m.EventID.String(),
		sink.HeaderEventType, m.EventType,
		sink.HeaderAggregateType, "payment",
		sink.HeaderAggregateID, "tx-1",
		sink.HeaderAttempt, "1",
		redissink.FieldPayload, string(m.Payload),
	}
	if strings.Join(kv[:len(want)], "|") != strings.Join(want, "|") {
		t.Fatalf("entry fields %q, want them to start with %q", kv, want)
	}
	rest := map[string]string{}
	for i := len(want); i+1 < len(kv); i += 2 {
		rest[kv[i]] = kv[i+1]
	}
	if len(rest) != 2 || rest["traceparent"] != "00-abc-def-01" || rest[redissink.FieldRenamedPayloadHeader] != "a header, not the payload" {
		t.Fatalf("event headers arrived as %v", rest)
	}
}

// TestClassification: WRONGTYPE is permanent and says what to do; a
// server that is down, and a wrong password, are retryable, and the
// password never shows in an error.
func TestClassification(t *testing.T) {
	t.Parallel()
	t.Run("WrongType", func(t *testing.T) {
		t.Parallel()
		addr, db := sharedRedis(t)
		prefix := uniquePrefix(t)
		c := newClient(t, addr, db)
		dropPrefix(t, c, prefix)
		if err := c.Set(testCtx(t), prefix+".merchant.events", "a string", 0).Err(); err != nil {
			t.Fatal(err)
		}
		s := newSink(t, redissink.Config{Addr: addr, DB: db, Route: prefix + ".{aggregate_type}.events"})
		bad := sinktest.Message("m-1", 0)
		bad.AggregateType = "merchant"
		next := bad
		next.EventID = outbox.NewEventID()
		good := sinktest.Message("tx-1", 0)
		res := s.Publish(testCtx(t), []outbox.Message{bad, next, good})
		if !outbox.IsPermanent(res[0]) || !strings.Contains(res[0].Error(), "WRONGTYPE") || !strings.Contains(res[0].Error(), "--route") {
			t.Fatalf("XADD to a string key: %v, want a permanent WRONGTYPE error with a hint", res[0])
		}
		if res[1] == nil {
			t.Fatal("the follower of a refused message was reported delivered")
		}
		if res[2] != nil {
			t.Fatalf("another aggregate's message: %v", res[2])
		}
	})
	t.Run("ServerDown", func(t *testing.T) {
		t.Parallel()
		srv := startServer(t)
		addr := srv.addr()
		srv.kill()
		s := newSink(t, redissink.Config{Addr: addr, Timeout: time.Second, DialTimeout: 200 * time.Millisecond})
		res := s.Publish(testCtx(t), []outbox.Message{sinktest.Message("d", 0), sinktest.Message("e", 0)})
		for i, err := range res {
			if err == nil || outbox.IsPermanent(err) || errors.Is(err, outbox.ErrNotAttempted) {
				t.Fatalf("message %d with the server down: %v, want a retryable error", i, err)
			}
		}
	})
	t.Run("WrongPassword", func(t *testing.T) {
		t.Parallel()
		srv := startServer(t, "--requirepass", "right-secret")
		s := newSink(t, redissink.Config{Addr: srv.addr(), Password: "wrong-secret"})
		err := s.Publish(testCtx(t), []outbox.Message{sinktest.Message("p", 0)})[0]
		if err == nil || outbox.IsPermanent(err) {
			t.Fatalf("wrong password: %v, want retryable (a configuration fix must not dead-letter events)", err)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Fatalf("the error quotes a password: %v", err)
		}
		ok := newSink(t, redissink.Config{Addr: srv.addr(), Password: "right-secret"})
		if err := ok.Publish(testCtx(t), []outbox.Message{sinktest.Message("p", 0)})[0]; err != nil {
			t.Fatalf("right password: %v", err)
		}
	})
}

// TestMaxLenTrims: with MaxLen the stream stays near that length.
func TestMaxLenTrims(t *testing.T) {
	t.Parallel()
	addr, db := sharedRedis(t)
	prefix := uniquePrefix(t)
	c := newClient(t, addr, db)
	dropPrefix(t, c, prefix)
	s := newSink(t, redissink.Config{Addr: addr, DB: db, Route: prefix + ".{aggregate_type}.events", MaxLen: 10})
	const total = 1000
	for call := 0; call < 10; call++ {
		var msgs []outbox.Message
		for i := 0; i < total/10; i++ {
			msgs = append(msgs, sinktest.Message(fmt.Sprintf("k%d", i%7), call*100+i))
		}
		for i, err := range s.Publish(testCtx(t), msgs) {
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
	}
	n, err := c.XLen(testCtx(t), prefix+".payment.events").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Approximate trimming removes whole radix-tree nodes (100 entries by
	// default), so the stream keeps between MaxLen and MaxLen+100 entries.
	if n < 10 || n > 10+100 {
		t.Fatalf("stream length %d after %d appends with MaxLen 10", n, total)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  redissink.Config
		want string
	}{
		{"no address", redissink.Config{}, "no address"},
		{"bad route", redissink.Config{Addr: "h", Route: "{tenant}"}, "unknown placeholder"},
		{"negative db", redissink.Config{Addr: "h", DB: -1}, "DB -1 is negative"},
		{"negative maxlen", redissink.Config{Addr: "h", MaxLen: -5}, "MaxLen -5 is negative"},
		{"negative timeout", redissink.Config{Addr: "h", Timeout: -time.Second}, "Timeout -1s is negative"},
	} {
		_, err := redissink.New(context.Background(), tc.cfg)
		if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidConfig mentioning %q", tc.name, err, tc.want)
		}
	}
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	cfg, err := redissink.ParseURL("redis://relay:pa%40ss@cache:6380/2?stream=outbox:{aggregate_type}&maxlen=100000&timeout=3s&dial_timeout=1s&client_name=relay-a")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "cache:6380" || cfg.Username != "relay" || cfg.Password != "pa@ss" || cfg.DB != 2 ||
		cfg.Route != "outbox:{aggregate_type}" || cfg.MaxLen != 100000 || cfg.Timeout != 3*time.Second ||
		cfg.DialTimeout != time.Second || cfg.ClientName != "relay-a" || cfg.TLS != nil {
		t.Fatalf("parsed %+v", cfg)
	}
	cfg, err = redissink.ParseURL("rediss://:token@cache")
	if err != nil || cfg.TLS == nil || cfg.Password != "token" || cfg.Addr != "cache" {
		t.Fatalf("rediss: %+v, %v", cfg, err)
	}
	for raw, want := range map[string]string{
		"http://cache:6379":                "use the form redis://",
		"redis://":                         "names no host",
		"redis://cache/zero":               "not a database number",
		"redis://cache?stream={tenant}":    "unknown placeholder",
		"redis://cache?maxlen=lots":        "not a whole number",
		"redis://cache?maxlen=-1":          "MaxLen -1 is negative",
		"redis://cache?pool_size=3":        `unknown option "pool_size"`,
		"redis://u:secret@cache?timeout=x": "not a duration",
		"redis://cache?stream=a&stream=b":  "given 2 times",
	} {
		_, err := redissink.ParseURL(raw)
		if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseURL(%q) = %v, want ErrInvalidConfig mentioning %q", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseURL(%q) quotes the password: %v", raw, err)
		}
	}
}
