package binlog_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/e2etest"
	"github.com/txoutbox/outbox/store/mysql/binlog"
)

// atOrAfter reports whether p is at or past q in the binary log (file names
// of one server have one width).
func atOrAfter(p, q binlog.Position) bool {
	return p.File > q.File || p.File == q.File && p.Offset >= q.Offset
}

// The real CLI with --source binlog, as a user with a password: the admin
// API's stats and `outbox status` (text and JSON) show the source, its
// saved position, the relay holding the stream lease and the lag, and
// none of them, nor the relay's log, shows the password; the saved
// position moves forward while the outbox is idle and other tables
// write; `outbox migrate --down` drops the lease and position tables.
func TestBinlogSourceInStatusAdminAPIAndMigrateDown(t *testing.T) {
	h := newSourceHarness(t, "binlog_status_events")
	const password = "Pw-binlog-status-7f3a9"
	h.srv.Exec(t, "CREATE USER 'relay'@'127.0.0.1' IDENTIFIED BY '"+password+"'")
	h.srv.Exec(t, "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'relay'@'127.0.0.1'")
	h.srv.Exec(t, "GRANT ALL PRIVILEGES ON test.* TO 'relay'@'127.0.0.1'")
	dsn := fmt.Sprintf("mysql://relay:%s@127.0.0.1:%d/test", password, h.srv.Port())
	noSecret := func(what, s string) {
		t.Helper()
		if strings.Contains(s, password) {
			t.Fatalf("%s shows the DSN's password:\n%s", what, s)
		}
	}
	sink := httptest.NewServer(newReceiver())
	t.Cleanup(sink.Close)
	admin := freeAddr(t)
	const relayID = "binlog-status-relay"
	relay := e2etest.StartCLI(t, "relay", "--db", dsn, "--table", h.table, "--sink", sink.URL+"/events",
		"--source", "binlog", "--stream-lease", "2s", "--safety-poll", "2s", "--relay-id", relayID,
		"--admin", admin, "--admin-insecure-no-auth")
	eventually(t, 2*time.Minute, "the relay to read the binary log", func() bool {
		if relay.Exited() {
			t.Fatalf("the relay exited: %v\n%s", relay.Err(), relay.Log())
		}
		return strings.Contains(relay.Log(), "reading the binary log")
	}, relay.Log)
	ctx := testContext(t, 3*time.Minute)
	h.enqueue(t, ctx, 0, 20, 4)
	eventually(t, time.Minute, "every event PROCESSED", func() bool { return h.count(t, outbox.StatusProcessed) == 20 }, relay.Log)
	var saved binlog.SavedPosition
	eventually(t, time.Minute, "a saved position held by the relay", func() bool {
		var err error
		saved, err = binlog.ReadSaved(ctx, h.db, h.table)
		return err == nil && saved.Exists && saved.Holder == relayID
	})

	t.Run("AdminAPI", func(t *testing.T) {
		resp, err := http.Get("http://" + admin + "/api/v1/stats")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stats: %s: %s", resp.Status, body)
		}
		noSecret("the admin API's stats", string(body))
		var s struct {
			CDC *struct {
				Source, Stream, Position, File, Holder string
				Offset                                 uint32
				LagBytes                               *int64 `json:"lag_bytes"`
			}
		}
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatal(err)
		}
		c := s.CDC
		if c == nil || c.Source != "binlog" || c.Stream != h.table+"_binlog" || c.Holder != relayID ||
			c.File != saved.Position.File || c.Offset < saved.Position.Offset || !strings.HasPrefix(c.Position, c.File+":") ||
			c.LagBytes == nil || *c.LagBytes < 0 {
			t.Fatalf("stats cdc %+v, want the binlog stream held by %s at or past %s with a lag", c, relayID, saved.Position)
		}
	})

	t.Run("StatusText", func(t *testing.T) {
		out := e2etest.RunCLI(t, "", "status", "--db", dsn, "--table", h.table)
		noSecret("outbox status", out)
		want := fmt.Sprintf("stream %s_binlog, read by %s", h.table, relayID)
		if !strings.Contains(out, "cdc binlog position") || !strings.Contains(out, saved.Position.File+":") || !strings.Contains(out, want) {
			t.Fatalf("outbox status shows no binlog position of %s read by %s:\n%s", saved.Position.File, relayID, out)
		}
	})

	t.Run("StatusJSON", func(t *testing.T) {
		out := e2etest.RunCLI(t, "", "status", "--db", dsn, "--table", h.table, "--json")
		noSecret("outbox status --json", out)
		var s struct {
			Stream   string  `json:"cdc_binlog_stream"`
			Position string  `json:"cdc_binlog_position"`
			File     string  `json:"cdc_binlog_file"`
			Offset   uint32  `json:"cdc_binlog_offset"`
			Holder   string  `json:"cdc_binlog_holder"`
			Lag      *int64  `json:"cdc_binlog_lag_bytes"`
			Saved    *string `json:"cdc_binlog_saved_at"`
		}
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		if s.Stream != h.table+"_binlog" || s.File != saved.Position.File || s.Offset < saved.Position.Offset ||
			!strings.HasPrefix(s.Position, s.File+":") || s.Holder != relayID || s.Lag == nil || *s.Lag < 0 || s.Saved == nil {
			t.Fatalf("outbox status --json: %+v, want the binlog stream held by %s at or past %s:\n%s", s, relayID, saved.Position, out)
		}
	})

	t.Run("IdleOutboxPositionMoves", func(t *testing.T) {
		h.srv.Exec(t, "CREATE TABLE binlog_status_other (id INT PRIMARY KEY AUTO_INCREMENT, note VARCHAR(40))")
		h.srv.Exec(t, "FLUSH BINARY LOGS")
		for i := 0; i < 3; i++ {
			h.srv.Exec(t, "INSERT INTO binlog_status_other (note) VALUES ('another table writes')")
		}
		target, err := binlog.CurrentPosition(ctx, h.db)
		if err != nil {
			t.Fatal(err)
		}
		if !atOrAfter(target, saved.Position) || target.File == saved.Position.File {
			t.Fatalf("the other table's writes end at %s, not in a later file than the saved %s", target, saved.Position)
		}
		var now binlog.SavedPosition
		eventually(t, time.Minute, "the saved position to reach the other table's writes", func() bool {
			now, err = binlog.ReadSaved(ctx, h.db, h.table)
			return err == nil && atOrAfter(now.Position, target)
		}, func() string {
			return fmt.Sprintf("saved %s, the other table's writes end at %s", now.Position, target)
		})
		if n := h.count(t, outbox.StatusProcessed); n != 20 {
			t.Fatalf("%d events PROCESSED, want the 20 enqueued", n)
		}
	})

	relay.Kill()
	noSecret("the relay's log", relay.Log())

	t.Run("MigrateDownDropsTables", func(t *testing.T) {
		binlogTables := func() int {
			var n int
			err := h.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'test' AND TABLE_NAME IN (?, ?)",
				h.table+"_cdc_lease", h.table+"_cdc_position").Scan(&n)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := binlogTables(); n != 2 {
			t.Fatalf("%d of %s_cdc_lease and %s_cdc_position exist before migrate --down, want both", n, h.table, h.table)
		}
		e2etest.RunCLI(t, "", "migrate", "--down", "--yes", "--db", h.srv.DSN(), "--table", h.table)
		if n := binlogTables(); n != 0 {
			t.Fatalf("%d of %s_cdc_lease and %s_cdc_position remain after migrate --down", n, h.table, h.table)
		}
	})
}
