package testenv_test

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/txoutbox/outbox/internal/testenv"
)

func TestMariaDBServerKeepsDataAndPortAcrossRestart(t *testing.T) {
	srv := testenv.StartMariaDB(t, "--log-bin=mysql-bin", "--server-id=3")
	srv.Exec(t, "CREATE TABLE kept (id INT PRIMARY KEY)")
	srv.Exec(t, "INSERT INTO kept VALUES (42)")
	port := srv.Port()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if srv.Port() != port {
		t.Fatalf("port %d after the restart, was %d", srv.Port(), port)
	}
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:"+strconv.Itoa(port)+")/test")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var id int
	var logBin string
	if err := db.QueryRowContext(ctx, "SELECT id, @@log_bin FROM kept").Scan(&id, &logBin); err != nil {
		t.Fatal(err)
	}
	if id != 42 || logBin != "1" {
		t.Fatalf("after the restart: id %d, log_bin %s; want 42 and 1 (the options are kept)", id, logBin)
	}
	if want := "mysql://root@127.0.0.1:" + strconv.Itoa(port) + "/test"; srv.DSN() != want {
		t.Fatalf("DSN() = %q, want %q", srv.DSN(), want)
	}
}
