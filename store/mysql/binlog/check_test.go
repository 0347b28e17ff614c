package binlog_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/store/mysql/binlog"
)

func TestCheckServerRefusesServerWithoutBinaryLog(t *testing.T) {
	srv := testenv.StartMariaDB(t, "--server-id=7")
	db := openDB(t, srv.DSN())
	err := binlog.CheckServer(testContext(t, time.Minute), db)
	if !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Fatalf("CheckServer on a server without --log-bin: %v, want an error matching outbox.ErrInvalidConfig", err)
	}
	if !strings.Contains(err.Error(), "--log-bin") {
		t.Fatalf("the error does not name --log-bin: %v", err)
	}
	t.Logf("refused: %v", err)
}

// checkServerCases runs on the shared binlog server (TestOnBinlogServer).
func checkServerCases(t *testing.T, srv *testenv.MariaDBServer) {
	t.Run("PassesWithRowFormat", func(t *testing.T) {
		if err := binlog.CheckServer(testContext(t, time.Minute), openDB(t, srv.DSN())); err != nil {
			t.Fatalf("CheckServer on a server with --log-bin --binlog-format=ROW: %v", err)
		}
	})
	t.Run("RefusesStatementFormat", func(t *testing.T) {
		db := openDB(t, srv.DSN())
		mustExec(t, db, "SET GLOBAL binlog_format = 'STATEMENT'")
		t.Cleanup(func() { mustExec(t, db, "SET GLOBAL binlog_format = 'ROW'") })
		err := binlog.CheckServer(testContext(t, time.Minute), db)
		if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "binlog_format=ROW") {
			t.Fatalf("CheckServer with binlog_format STATEMENT: %v, want an outbox.ErrInvalidConfig naming binlog_format=ROW", err)
		}
		if strings.Contains(err.Error(), "--log-bin") {
			t.Fatalf("the error names --log-bin, which is on: %v", err)
		}
		t.Logf("refused: %v", err)
	})
	t.Run("NamesMissingReplicationPrivileges", func(t *testing.T) {
		db := openDB(t, srv.DSN())
		mustExec(t, db, "CREATE USER 'plain'@'127.0.0.1' IDENTIFIED BY 'plain-secret'")
		mustExec(t, db, "GRANT SELECT ON test.* TO 'plain'@'127.0.0.1'")
		plain := openDB(t, strings.Replace(srv.DSN(), "root@", "plain:plain-secret@", 1))
		err := binlog.CheckServer(testContext(t, time.Minute), plain)
		if !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Fatalf("CheckServer as a user without replication privileges: %v", err)
		}
		for _, want := range []string{"GRANT REPLICATION SLAVE ON *.* TO 'plain'@'127.0.0.1'", "GRANT REPLICATION CLIENT ON *.* TO 'plain'@'127.0.0.1'"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not say %q: %v", want, err)
			}
		}
		t.Logf("refused: %v", err)
		mustExec(t, db, "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'plain'@'127.0.0.1'")
		if err := binlog.CheckServer(testContext(t, time.Minute), plain); err != nil {
			t.Fatalf("CheckServer once REPLICATION SLAVE and BINLOG MONITOR are granted: %v", err)
		}
	})
}
