// Package java_test runs the Java producer of this directory against a
// live relay on PostgreSQL and on MariaDB/MySQL.
package java_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/internal/testenv/pgtest"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/relay/relaytest"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/mysql"
	"github.com/txoutbox/outbox/store/storetest"
)

// The JDBC drivers as Debian's libmariadb-java and libpostgresql-jdbc-java
// install them (OUTBOX_TEST_JDBC_JARS overrides, as a class path).
var defaultJars = []string{"/usr/share/java/mariadb-java-client.jar", "/usr/share/java/postgresql.jar"}

const (
	threads    = 8
	perThread  = 25
	aggregates = 20
)

// javaTools returns java and the class path with the JDBC drivers, or
// skips (fails under CI=true) naming what is missing.
func javaTools(t *testing.T) (javac, java, classPath string) {
	t.Helper()
	var missing []string
	javac, errC := exec.LookPath("javac")
	java, errJ := exec.LookPath("java")
	if errC != nil || errJ != nil {
		missing = append(missing, "javac/java (Debian: default-jdk-headless)")
	}
	jars := defaultJars
	if cp := os.Getenv("OUTBOX_TEST_JDBC_JARS"); cp != "" {
		jars = filepath.SplitList(cp)
	}
	for _, j := range jars {
		if _, err := os.Stat(j); err != nil {
			missing = append(missing, j+" (Debian: libmariadb-java, libpostgresql-jdbc-java)")
		}
	}
	if len(missing) > 0 {
		msg := "the Java producer test needs " + strings.Join(missing, ", ") +
			": apt-get install default-jdk-headless libmariadb-java libpostgresql-jdbc-java, or set OUTBOX_TEST_JDBC_JARS"
		if testenv.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return javac, java, strings.Join(jars, string(os.PathListSeparator))
}

// compile builds OutboxProducer.java into a temporary directory.
func compile(t *testing.T, javac string) string {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command(javac, "-d", out, "OutboxProducer.java")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, b)
	}
	return out
}

func TestJavaProducerPostgres(t *testing.T) {
	t.Parallel()
	javac, java, jars := javaTools(t)
	classes := compile(t, javac)
	pool, s := pgtest.Outbox(t, "javapg")
	table := s.Table()
	jdbc := jdbcURL(t, "jdbc:postgresql", testenv.Postgres.Addr(t))
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	runJava(t, java, classes+string(os.PathListSeparator)+jars, jdbc, s, db, table)
}

func TestJavaProducerMySQL(t *testing.T) {
	t.Parallel()
	javac, java, jars := javaTools(t)
	classes := compile(t, javac)
	dsn := testenv.MySQL.Addr(t)
	ctx := context.Background()
	c, err := mysql.NewConnector(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	table := storetest.TableName("javamy")
	t.Cleanup(func() {
		if err := storetest.DropMySQLTables(context.Background(), db, table); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	s, err := mysql.New(db, mysql.Config{Table: table, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	jdbc := jdbcURL(t, "jdbc:mariadb", dsn)
	runJava(t, java, classes+string(os.PathListSeparator)+jars, jdbc, s, db, table)
}

// jdbcURL is the JDBC URL, under scheme, of the server and database of
// the URL-form dsn, with its user and password as parameters.
func jdbcURL(t *testing.T, scheme, dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := url.Values{"user": {u.User.Username()}}
	if p, ok := u.User.Password(); ok {
		q.Set("password", p)
	}
	return scheme + "://" + u.Host + u.Path + "?" + q.Encode()
}

// runJava runs the producer while a relay delivers, then checks: every
// committed payment's event is delivered once, each aggregate's events
// arrive numbered 1, 2, 3 ... and each thread's in its commit order, and
// the rolled-back payment has neither a row nor an event.
func runJava(t *testing.T, java, classPath, jdbc string, s store.Store, db *sql.DB, table string) {
	rec := &relaytest.Recorder{Name: "sink"}
	newRelay := func(id string) *relay.Relay {
		r, err := relay.New(relay.Config{Store: s, Sink: rec, RelayID: id, BatchSize: 50,
			PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	runCtx, stopRelay := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := newRelay("java-live").Run(runCtx); err != nil {
			t.Errorf("relay: %v", err)
		}
	}()
	defer func() { stopRelay(); wg.Wait() }()

	payments := table + "_payments"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, java, "-cp", classPath, "OutboxProducer", jdbc, table, payments,
		fmt.Sprint(threads), fmt.Sprint(perThread), fmt.Sprint(aggregates))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("java producer: %v\n%s", err, stderr.String())
	}
	committed := map[string]string{} // payment id -> aggregate
	var rolledBack []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			t.Fatalf("unexpected producer output %q", sc.Text())
		}
		switch f[0] {
		case "committed":
			committed[f[1]] = f[2]
		case "rolled-back":
			rolledBack = append(rolledBack, f[1])
		}
	}
	if len(committed) != threads*perThread-1 || len(rolledBack) != 1 {
		t.Fatalf("the producer reported %d commits and %d rollbacks, want %d and 1", len(committed), len(rolledBack), threads*perThread-1)
	}

	// The live relay delivered as the producer wrote; a second relay
	// delivers what is left.
	stopRelay()
	wg.Wait()
	dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer dcancel()
	if err := newRelay("java-drain").Drain(dctx); err != nil {
		t.Fatalf("drain: %v", err)
	}

	var rows int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+payments).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != len(committed) {
		t.Fatalf("%d payment rows, want the %d committed", rows, len(committed))
	}
	next := map[string]int64{}
	lastTx := map[string]int{} // aggregate/thread -> last tx
	delivered := map[string]bool{}
	violations := 0
	for _, d := range rec.Deliveries() {
		r, err := s.GetEvent(ctx, d.EventID)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Payment string `json:"payment"`
			Thread  int    `json:"thread"`
			Tx      int    `json:"tx"`
		}
		if err := json.Unmarshal(r.Payload, &p); err != nil {
			t.Fatalf("payload %s: %v", r.Payload, err)
		}
		if delivered[p.Payment] {
			t.Errorf("payment %s delivered twice", p.Payment)
		}
		delivered[p.Payment] = true
		if committed[p.Payment] != r.AggregateID {
			t.Errorf("delivered payment %s of aggregate %s, which the producer did not commit", p.Payment, r.AggregateID)
		}
		next[d.Key]++
		key := fmt.Sprintf("%s/%d", r.AggregateID, p.Thread)
		if prev, ok := lastTx[key]; d.Seq != next[d.Key] || (ok && p.Tx <= prev) {
			violations++
			t.Errorf("aggregate %s: payment %s (thread %d tx %d) delivered as number %d with seq %d", r.AggregateID, p.Payment, p.Thread, p.Tx, next[d.Key], d.Seq)
		}
		lastTx[key] = p.Tx
	}
	for id := range committed {
		if !delivered[id] {
			t.Errorf("committed payment %s was never delivered", id)
		}
	}
	for _, id := range rolledBack {
		if delivered[id] {
			t.Errorf("rolled-back payment %s was delivered", id)
		}
	}
	t.Logf("Java producer, %d threads x %d transactions over %d aggregates: %d delivered, %d lost, %d order violations, rolled-back %v delivered: %v",
		threads, perThread, aggregates, len(delivered), len(committed)-len(delivered), violations, rolledBack, delivered[rolledBack[0]])
}
