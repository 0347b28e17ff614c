// Package testenv finds the services the tests need. Each address comes from
// an OUTBOX_TEST_* variable with a local default; when the service cannot be
// reached the test is skipped with a message naming the variable, except
// under CI=true, where it fails.
package testenv

import (
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// Service describes one external service.
type Service struct {
	Var     string // environment variable, e.g. OUTBOX_TEST_POSTGRES
	Default string // default address/DSN
	What    string // human name
}

var (
	Postgres = Service{"OUTBOX_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL"}
	MySQL    = Service{"OUTBOX_TEST_MYSQL", "mysql://root@127.0.0.1:3306/test", "MySQL/MariaDB"}
	Redis    = Service{"OUTBOX_TEST_REDIS", "redis://127.0.0.1:6379/0", "Redis"}
	AMQP     = Service{"OUTBOX_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ"}
	NATS     = Service{"OUTBOX_TEST_NATS", "nats://127.0.0.1:4222", "NATS JetStream"}
)

// InCI reports whether CI=true.
func InCI() bool { return os.Getenv("CI") == "true" }

// Short reports whether the heavy tests should shrink (OUTBOX_TEST_SHORT=1 or -short).
func Short() bool { return os.Getenv("OUTBOX_TEST_SHORT") == "1" || testing.Short() }

// Addr returns the service's DSN and skips (or, in CI, fails) the test when
// its host:port does not accept a TCP connection.
func (s Service) Addr(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(s.Var)
	if dsn == "" {
		dsn = s.Default
	}
	hostport := hostPort(dsn)
	conn, err := net.DialTimeout("tcp", hostport, 2*time.Second)
	if err != nil {
		msg := s.What + " is not reachable at " + hostport + " (" + err.Error() + "); set " + s.Var + " to its address"
		if InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	conn.Close()
	return dsn
}

func hostPort(dsn string) string {
	// go-sql-driver/mysql's own form: user:pass@tcp(host:port)/db.
	if i := strings.Index(dsn, "@tcp("); i >= 0 && !strings.Contains(dsn, "://") {
		if j := strings.IndexByte(dsn[i:], ')'); j > 0 {
			host := dsn[i+len("@tcp(") : i+j]
			if _, _, err := net.SplitHostPort(host); err != nil {
				host = net.JoinHostPort(host, "3306")
			}
			return host
		}
	}
	u, err := url.Parse(dsn)
	if err == nil && u.Host != "" {
		host := u.Host
		if i := strings.IndexByte(host, ','); i >= 0 {
			host = host[:i]
		}
		if _, _, err := net.SplitHostPort(host); err != nil {
			return host + ":" + defaultPort(u.Scheme)
		}
		return host
	}
	return "127.0.0.1:" + defaultPort("")
}

func defaultPort(scheme string) string {
	switch scheme {
	case "mysql", "mariadb":
		return "3306"
	case "redis":
		return "6379"
	case "amqp":
		return "5672"
	case "nats":
		return "4222"
	}
	return "5432"
}
