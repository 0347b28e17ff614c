package postgres_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txoutbox/outbox/store/postgres"
)

// TestOpenSaysARefusedConnectionOnce: under the default sslmode=prefer pgx
// tries the address twice (with TLS, then without); Open's error says the
// refusal once, and still unwraps to the driver's *pgconn.ConnectError.
func TestOpenSaysARefusedConnectionOnce(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there now: connections are refused
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = postgres.Open(ctx, "postgres://postgres:hunter2@127.0.0.1:"+strconv.Itoa(port)+"/test", postgres.Config{})
	if err == nil {
		t.Fatal("Open on a closed port succeeded")
	}
	msg := err.Error()
	if n := strings.Count(msg, "connection refused"); n != 1 {
		t.Errorf("the error says \"connection refused\" %d times, want once: %s", n, msg)
	}
	if !strings.HasPrefix(msg, "connect to PostgreSQL at 127.0.0.1:"+strconv.Itoa(port)+": failed to connect to `user=postgres database=test`: ") {
		t.Errorf("error %q: want it to name the address, the user and the database", msg)
	}
	if strings.Contains(msg, "hunter2") {
		t.Errorf("the error shows the password: %s", msg)
	}
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		t.Errorf("the error does not unwrap to a *pgconn.ConnectError: %#v", err)
	}
}
