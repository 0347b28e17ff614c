package binlog_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/store/mysql/binlog"
)

// TestOnBinlogServer runs, in order, the tests that share one private
// server with the binary log on: a server boot is the costly part.
func TestOnBinlogServer(t *testing.T) {
	srv := testenv.StartMariaDB(t, binlogServerArgs...)
	t.Run("CheckServer", func(t *testing.T) { checkServerCases(t, srv) })
	var txs []binlog.Transaction
	t.Run("StreamsCommittedInsertsOfOneTable", func(t *testing.T) { txs = streamsCommittedInserts(t, srv) })
	t.Run("RestartsFromYieldedPosition", func(t *testing.T) { restartsFromYieldedPosition(t, srv, txs) })
	t.Run("RestartsFromGTIDSet", func(t *testing.T) { restartsFromGTIDSet(t, srv, txs) })
	t.Run("YieldsTransactionCommittedAfterStart", func(t *testing.T) { yieldsTransactionCommittedAfterStart(t, srv) })
	t.Run("ErrorsHideThePassword", func(t *testing.T) { errorsHideThePassword(t, srv) })
	t.Run("ReportsPurgedPosition", func(t *testing.T) { reportsPurgedPosition(t, srv, txs) })
}

// txSizes are the rows each of the ten transactions inserts: 5,000 in all.
var txSizes = []int{1, 999, 700, 300, 500, 500, 1000, 250, 250, 500}

// expected holds what the ten transactions wrote.
type expected struct {
	start binlog.Position // before the first
	ids   [][]int64       // per transaction, in id order
}

var written expected

func openReader(t testing.TB, srv *testenv.MariaDBServer) *binlog.Reader {
	t.Helper()
	r, err := binlog.Open(testContext(t, time.Minute), binlog.Config{DSN: srv.DSN(), Table: "events"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// writeTransactions commits the ten transactions into events, each also
// inserting into other_events, with an other_events-only transaction
// and an update of events between them, and FLUSH BINARY LOGS between
// the fifth and the sixth.
func writeTransactions(t *testing.T, srv *testenv.MariaDBServer) {
	db := openDB(t, srv.DSN())
	ctx := testContext(t, 2*time.Minute)
	for _, table := range []string{"events", "other_events"} {
		mustExec(t, db, "CREATE TABLE "+table+" (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, tx INT NOT NULL, payload VARCHAR(64) NOT NULL) ENGINE=InnoDB")
	}
	start, err := binlog.CurrentPosition(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	written.start = start
	for i, n := range txSizes {
		if i == 5 {
			mustExec(t, db, "FLUSH BINARY LOGS")
		}
		commitTransaction(t, ctx, db, i+1, n)
		mustExec(t, db, "INSERT INTO other_events (tx, payload) VALUES (?, 'alone')", i+1)
		mustExec(t, db, "UPDATE events SET payload = 'updated' WHERE tx = ?", i+1)
	}
	rows, err := db.QueryContext(ctx, "SELECT id, tx FROM events ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	written.ids = make([][]int64, len(txSizes))
	for rows.Next() {
		var id int64
		var tx int
		if err := rows.Scan(&id, &tx); err != nil {
			t.Fatal(err)
		}
		written.ids[tx-1] = append(written.ids[tx-1], id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// commitTransaction inserts n rows into events, in statements of up to
// 250 rows, and a row into other_events, in one transaction.
func commitTransaction(t *testing.T, ctx context.Context, db *sql.DB, tx, n int) {
	t.Helper()
	sqlTx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sqlTx.Rollback()
	for done := 0; done < n; {
		chunk := min(250, n-done)
		values := strings.TrimSuffix(strings.Repeat(fmt.Sprintf("(%d, 'p'),", tx), chunk), ",")
		if _, err := sqlTx.ExecContext(ctx, "INSERT INTO events (tx, payload) VALUES "+values); err != nil {
			t.Fatal(err)
		}
		if done == 0 {
			if _, err := sqlTx.ExecContext(ctx, "INSERT INTO other_events (tx, payload) VALUES (?, 'with')", tx); err != nil {
				t.Fatal(err)
			}
		}
		done += chunk
	}
	if err := sqlTx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// readTransactions reads n transactions from a stream started at from,
// then checks that no other one follows.
func readTransactions(t *testing.T, r *binlog.Reader, from binlog.Position, n int) []binlog.Transaction {
	t.Helper()
	ctx := testContext(t, 2*time.Minute)
	s, err := r.Start(ctx, from)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var txs []binlog.Transaction
	for len(txs) < n {
		tx, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("Next after %d transactions: %v", len(txs), err)
		}
		txs = append(txs, tx)
	}
	quiet, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if tx, err := s.Next(quiet); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after the last transaction, Next returned %d ids at %s, %v; want the context's deadline", len(tx.IDs), tx.Position, err)
	}
	return txs
}

func streamsCommittedInserts(t *testing.T, srv *testenv.MariaDBServer) []binlog.Transaction {
	writeTransactions(t, srv)
	r := openReader(t, srv)
	if r.Flavor() != "mariadb" {
		t.Errorf("Flavor() = %q, want mariadb", r.Flavor())
	}
	fromFile := binlog.Position{File: written.start.File, Offset: written.start.Offset}
	txs := readTransactions(t, r, fromFile, len(txSizes))
	total := 0
	for i, tx := range txs {
		total += len(tx.IDs)
		if !slices.Equal(tx.IDs, written.ids[i]) {
			t.Errorf("transaction %d: %d ids %v..., want the %d ids of tx %d", i+1, len(tx.IDs), head(tx.IDs), len(written.ids[i]), i+1)
		}
		if tx.GTID == "" {
			t.Errorf("transaction %d has no GTID", i+1)
		}
		if tx.Position.GTIDSet != "" {
			t.Errorf("transaction %d of a stream started from a file and offset has the GTID set %s in its position", i+1, tx.Position.GTIDSet)
		}
		if i > 0 && !after(tx.Position, txs[i-1].Position) {
			t.Errorf("transaction %d's position %s is not after transaction %d's %s", i+1, tx.Position, i, txs[i-1].Position)
		}
	}
	if total != 5000 {
		t.Errorf("%d ids in all, want 5000", total)
	}
	if txs[5].Position.File == txs[4].Position.File {
		t.Errorf("transactions 5 and 6 are both in %s, across FLUSH BINARY LOGS", txs[5].Position.File)
	}
	return txs
}

func restartsFromYieldedPosition(t *testing.T, srv *testenv.MariaDBServer, txs []binlog.Transaction) {
	if len(txs) != len(txSizes) {
		t.Skip("needs StreamsCommittedInsertsOfOneTable's transactions")
	}
	r := openReader(t, srv)
	again := readTransactions(t, r, txs[2].Position, 7)
	for i, tx := range again {
		want := txs[3+i]
		if !slices.Equal(tx.IDs, want.IDs) || tx.Position != want.Position {
			t.Errorf("restarted stream's transaction %d: %d ids at %s, want transaction %d: %d ids at %s",
				i+1, len(tx.IDs), tx.Position, 4+i, len(want.IDs), want.Position)
		}
	}
}

func restartsFromGTIDSet(t *testing.T, srv *testenv.MariaDBServer, txs []binlog.Transaction) {
	if len(txs) != len(txSizes) || written.start.GTIDSet == "" {
		t.Skip("needs StreamsCommittedInsertsOfOneTable's transactions and the server's GTID position")
	}
	r := openReader(t, srv)
	all := readTransactions(t, r, binlog.Position{GTIDSet: written.start.GTIDSet}, len(txSizes))
	for i, tx := range all {
		if !slices.Equal(tx.IDs, txs[i].IDs) || tx.GTID != txs[i].GTID {
			t.Fatalf("from GTID set %s, transaction %d: %d ids (%s), want %d ids (%s)", written.start.GTIDSet, i+1, len(tx.IDs), tx.GTID, len(txs[i].IDs), txs[i].GTID)
		}
		if tx.Position.GTIDSet == "" {
			t.Fatalf("transaction %d of a stream started from a GTID set has no GTID set in its position", i+1)
		}
	}
	again := readTransactions(t, r, binlog.Position{GTIDSet: all[2].Position.GTIDSet}, 7)
	if again[0].GTID != txs[3].GTID || again[6].GTID != txs[9].GTID {
		t.Fatalf("from GTID set %s: transactions %s..%s, want %s..%s", all[2].Position.GTIDSet, again[0].GTID, again[6].GTID, txs[3].GTID, txs[9].GTID)
	}
}

func errorsHideThePassword(t *testing.T, srv *testenv.MariaDBServer) {
	db := openDB(t, srv.DSN())
	mustExec(t, db, "CREATE USER 'secretive'@'127.0.0.1' IDENTIFIED BY 'Sup3rSecretPW'")
	dsn := strings.Replace(srv.DSN(), "root@", "secretive:Sup3rSecretPW@", 1)
	for name, cfg := range map[string]binlog.Config{
		"no such table":  {DSN: dsn, Table: "no_such_table"},
		"wrong password": {DSN: strings.Replace(dsn, "Sup3rSecretPW", "Sup3rSecretPWwrong", 1), Table: "events"},
		"no table":       {DSN: dsn},
	} {
		_, err := binlog.Open(testContext(t, time.Minute), cfg)
		if err == nil {
			t.Fatalf("%s: Open succeeded", name)
		}
		if strings.Contains(err.Error(), "Sup3rSecretPW") {
			t.Errorf("%s: the error shows the password: %v", name, err)
		}
	}
	// The replica connection's own authentication failure, and its log.
	mustExec(t, db, "GRANT SELECT ON test.* TO 'secretive'@'127.0.0.1'")
	var logs testenv.Buffer
	ctx := testContext(t, time.Minute)
	r, err := binlog.Open(ctx, binlog.Config{DSN: dsn, Table: "events", Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	mustExec(t, db, "ALTER USER 'secretive'@'127.0.0.1' IDENTIFIED BY 'another-one'")
	s, err := r.Start(ctx, written.start)
	if err == nil {
		defer s.Close()
		_, err = s.Next(ctx)
	}
	if err == nil || strings.Contains(err.Error(), "Sup3rSecretPW") {
		t.Errorf("a stream whose password was changed: %v, want an error without the password", err)
	}
	if strings.Contains(logs.String(), "Sup3rSecretPW") {
		t.Errorf("the log shows the password:\n%s", logs.String())
	}
}

func reportsPurgedPosition(t *testing.T, srv *testenv.MariaDBServer, txs []binlog.Transaction) {
	if len(txs) != len(txSizes) {
		t.Skip("needs StreamsCommittedInsertsOfOneTable's transactions")
	}
	db := openDB(t, srv.DSN())
	ctx := testContext(t, time.Minute)
	mustExec(t, db, "FLUSH BINARY LOGS")
	now, err := binlog.CurrentPosition(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, "PURGE BINARY LOGS TO '"+now.File+"'")
	r := openReader(t, srv)
	for _, from := range []binlog.Position{txs[0].Position, {GTIDSet: written.start.GTIDSet}} {
		if from.IsZero() {
			continue
		}
		s, err := r.Start(ctx, from)
		if err == nil {
			_, err = s.Next(ctx)
			s.Close()
		}
		if !errors.Is(err, binlog.ErrPositionPurged) {
			t.Fatalf("a stream from %s, purged: %v, want an error matching ErrPositionPurged", from, err)
		}
		if errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("a purged position is not a configuration error: %v", err)
		}
		t.Logf("purged: %v", err)
	}
}

// after reports whether p is later in the binary log than q.
func after(p, q binlog.Position) bool {
	if p.File != q.File {
		return p.File > q.File
	}
	return p.Offset > q.Offset
}

func head(ids []int64) []int64 { return ids[:min(len(ids), 3)] }

func yieldsTransactionCommittedAfterStart(t *testing.T, srv *testenv.MariaDBServer) {
	db := openDB(t, srv.DSN())
	r := openReader(t, srv)
	ctx := testContext(t, time.Minute)
	now, err := r.CurrentPosition(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Start(ctx, binlog.Position{File: now.File, Offset: now.Offset})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := make(chan binlog.Transaction, 1)
	failed := make(chan error, 1)
	go func() {
		tx, err := s.Next(ctx)
		if err != nil {
			failed <- err
			return
		}
		got <- tx
	}()
	commitTransaction(t, ctx, db, 11, 3)
	var want []int64
	rows, err := db.QueryContext(ctx, "SELECT id FROM events WHERE tx = 11 ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	select {
	case tx := <-got:
		if !slices.Equal(tx.IDs, want) || !after(tx.Position, now) {
			t.Fatalf("the stream yielded %v at %s, want %v after %s", tx.IDs, tx.Position, want, now)
		}
	case err := <-failed:
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal("the transaction committed after the stream started was not yielded within a minute")
	}
}
