package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
)

// MariaDB's programs for private servers; override the directory of both
// with OUTBOX_TEST_MARIADB_BIN.
const (
	mariadbInstallDB = "/usr/bin/mariadb-install-db"
	mariadbServer    = "/usr/sbin/mariadbd"
)

// MariaDBServer is a private MariaDB server for one test: its own data
// directory (in the test's temporary directory), its own port on
// 127.0.0.1, user root without a password over TCP, and a database named
// test. It is killed when the test ends and dies with the test process.
type MariaDBServer struct {
	dir, data string
	port      int
	args      []string
	cmd       *exec.Cmd
	done      chan struct{}
	log       Buffer
}

// StartMariaDB installs and starts a private MariaDB server with the extra
// server options args (e.g. "--log-bin=mysql-bin", "--binlog-format=ROW",
// "--server-id=7") and returns once it accepts connections. It is stopped
// in t.Cleanup. The test is skipped when MariaDB is not installed, and
// fails under CI=true.
func StartMariaDB(t testing.TB, args ...string) *MariaDBServer {
	t.Helper()
	install, server := mariadbBinaries()
	for _, bin := range []string{install, server} {
		if _, err := os.Stat(bin); err != nil {
			skipOrFail(t, "this test needs a private MariaDB server, and "+bin+" is missing ("+err.Error()+
				"); install mariadb-server or set OUTBOX_TEST_MARIADB_BIN to the directory holding mariadb-install-db and mariadbd")
		}
	}
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &MariaDBServer{dir: dir, data: filepath.Join(dir, "data"), port: port, args: args}
	t.Cleanup(func() { _ = s.Stop() })
	if err := os.Mkdir(s.tmpDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	// A temporary directory of its own: bootstraps sharing /tmp at once
	// remove each other's temporary tables and fail.
	installArgs := []string{"--no-defaults", "--datadir=" + s.data, "--tmpdir=" + s.tmpDir(),
		"--auth-root-authentication-method=normal", "--skip-test-db"}
	if os.Geteuid() == 0 {
		installArgs = append(installArgs, "--user=root")
	}
	out, err := exec.Command(install, installArgs...).CombinedOutput()
	if err != nil {
		skipOrFail(t, fmt.Sprintf("mariadb-install-db: %v\n%s", err, out))
	}
	if err := s.Start(); err != nil {
		skipOrFail(t, "the private MariaDB server did not start: "+err.Error())
	}
	if err := s.exec("", "CREATE DATABASE IF NOT EXISTS test"); err != nil {
		t.Fatal(err)
	}
	return s
}

// DSN returns the server's DSN in the store's form: user root, database
// test.
func (s *MariaDBServer) DSN() string {
	return "mysql://root@127.0.0.1:" + strconv.Itoa(s.port) + "/test"
}

// Port returns the server's TCP port.
func (s *MariaDBServer) Port() int { return s.port }

// Start starts the stopped server again, with the same data directory,
// port and options, and returns once it accepts connections (or after a
// minute, with the end of its log).
func (s *MariaDBServer) Start() error {
	if s.cmd != nil {
		return errors.New("the MariaDB server is already running")
	}
	_, server := mariadbBinaries()
	args := []string{
		"--no-defaults", // never the machine's /etc/mysql
		"--datadir=" + s.data,
		"--socket=" + filepath.Join(s.dir, "sock"),
		"--pid-file=" + filepath.Join(s.dir, "mariadbd.pid"),
		"--tmpdir=" + s.tmpDir(),
		"--port=" + strconv.Itoa(s.port),
		"--bind-address=127.0.0.1",
		"--skip-name-resolve",
		"--innodb-buffer-pool-size=16M",
		"--innodb-log-file-size=8M",
		"--innodb-flush-log-at-trx-commit=2",
		"--max-connections=50",
		"--performance-schema=OFF",
	}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	cmd := exec.Command(server, append(args, s.args...)...)
	cmd.Stdout, cmd.Stderr = &s.log, &s.log
	dieWithTestProcess(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", server, err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	done := s.done
	go func() { _ = cmd.Wait(); close(done) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.awaitConnection(ctx); err != nil {
		_ = s.Stop()
		return fmt.Errorf("%v\n%s", err, s.LogTail())
	}
	return nil
}

// Stop stops the server (SIGTERM, then SIGKILL after 30 seconds), keeping
// its data. Stopping a stopped server does nothing.
func (s *MariaDBServer) Stop() error {
	if s.cmd == nil {
		return nil
	}
	cmd, done := s.cmd, s.done
	s.cmd, s.done = nil, nil
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return nil
	case <-time.After(30 * time.Second):
	}
	_ = cmd.Process.Kill()
	<-done
	return errors.New("the MariaDB server did not stop within 30 seconds of SIGTERM and was killed")
}

// Exec runs statement as root in database test, or fails the test.
func (s *MariaDBServer) Exec(t testing.TB, statement string) {
	t.Helper()
	if err := s.exec("test", statement); err != nil {
		t.Fatal(err)
	}
}

func (s *MariaDBServer) exec(database, statement string) error {
	db, err := sql.Open("mysql", s.driverDSN(database))
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := db.ExecContext(ctx, statement); err != nil {
		return fmt.Errorf("private MariaDB: %s: %w", statement, err)
	}
	return nil
}

// LogTail returns the last lines of the server's output.
func (s *MariaDBServer) LogTail() string {
	lines := strings.Split(strings.TrimRight(s.log.String(), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

func (s *MariaDBServer) tmpDir() string { return filepath.Join(s.dir, "tmp") }

func (s *MariaDBServer) driverDSN(db string) string {
	return "root@tcp(127.0.0.1:" + strconv.Itoa(s.port) + ")/" + db
}

// awaitConnection polls until the server answers a ping, the server
// exits, or ctx ends.
func (s *MariaDBServer) awaitConnection(ctx context.Context) error {
	db, err := sql.Open("mysql", s.driverDSN("")+"?timeout=2s")
	if err != nil {
		return err
	}
	defer db.Close()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = s.ping(ctx, db); last == nil {
			return nil
		}
		select {
		case <-s.done:
			return errors.New("mariadbd exited while starting")
		case <-ctx.Done():
			return fmt.Errorf("mariadbd did not accept connections on 127.0.0.1:%d: %v", s.port, last)
		case <-tick.C:
		}
	}
}

func (s *MariaDBServer) ping(ctx context.Context, db *sql.DB) error {
	// A bare TCP dial first: the driver logs its failed handshakes.
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.port), time.Second)
	if err != nil {
		return err
	}
	c.Close()
	return db.PingContext(ctx)
}

func mariadbBinaries() (install, server string) {
	if d := os.Getenv("OUTBOX_TEST_MARIADB_BIN"); d != "" {
		return filepath.Join(d, "mariadb-install-db"), filepath.Join(d, "mariadbd")
	}
	return mariadbInstallDB, mariadbServer
}

func skipOrFail(t testing.TB, msg string) {
	t.Helper()
	if InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
