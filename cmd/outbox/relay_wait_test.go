package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/e2etest"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// A relay started while the database is down (its port refuses
// connections) waits, says so at WARN, and drains the backlog once the
// database is reachable (a proxy to the test PostgreSQL opens): nothing
// lost, exit 0.
func TestRelayWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	b := e2etest.NewBacklog(t, "wait_db", 200, e2etest.DefaultAggregates())
	u, err := url.Parse(b.DSN)
	if err != nil {
		t.Fatal(err)
	}
	proxy := sinktest.NewProxy(t, u.Host)
	u.Host = proxy.Addr
	relay := e2etest.StartCLI(t, "relay", "--drain", "--db", u.String(), "--table", b.Table, "--sink", "discard://",
		"--poll-interval", "20ms", "--progress", "0")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	relay.Await(ctx, t, 20*time.Millisecond, "the relay to say the database is unreachable", func() bool {
		return strings.Contains(relay.Log(), "the database is unreachable")
	})
	if err := proxy.Open(); err != nil {
		t.Fatal(err)
	}
	relay.Wait(ctx, t)
	if !strings.Contains(relay.Log(), "database reachable") {
		t.Errorf("no INFO line once the database was reached:\n%s", relay.Log())
	}
	if n := b.Processed(t); n != len(b.Events) {
		t.Fatalf("%d of %d events PROCESSED", n, len(b.Events))
	}
}

// A DSN that does not parse, and a wrong password (on MariaDB: the test
// PostgreSQL trusts every password), are still immediate, clear errors:
// the relay does not wait for them.
func TestRelayDatabaseConfigErrorsAreImmediate(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse(testenv.MySQL.Addr(t))
	u.User = url.UserPassword(u.User.Username(), "wrong-pass-9f3")
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://a:b@host:notaport/db", "parse"},
		{u.String(), "Access denied"},
	} {
		start := time.Now()
		_, stderr, code := cli(t, "", "relay", "--db", tc.dsn, "--sink", "discard://")
		if code == 0 || time.Since(start) > 20*time.Second || strings.Contains(stderr, "wrong-pass-9f3") || !strings.Contains(stderr, tc.want) {
			t.Errorf("relay --db %s: exit %d after %s, stderr %q: want a quick error without the password", redactURL(tc.dsn), code, time.Since(start), stderr)
		}
	}
}

func TestDBUnreachableClassification(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("connect: %w", errors.New("dial tcp 127.0.0.1:1: connect: connection refused")), true},
		{fmt.Errorf("%w: bad dsn", outbox.ErrInvalidConfig), false},
		{errors.New("FATAL: password authentication failed for user \"app\" (SQLSTATE 28P01)"), false},
		{errors.New("Error 1045 (28000): Access denied for user 'root'"), false},
		{context.DeadlineExceeded, true},
	} {
		if got := dbUnreachable(tc.err); got != tc.want {
			t.Errorf("dbUnreachable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
