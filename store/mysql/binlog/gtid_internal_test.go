package binlog

import (
	"encoding/hex"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// A MySQL 8 GTID_LOG_EVENT body as the server sends it (commit flag, the
// server's uuid, GNO 42, logical timestamps), and the XID that commits
// its transaction: the stream names the transaction uuid:42 and its
// position carries the MySQL GTID set.
func TestMySQLGTIDFromRecordedEvents(t *testing.T) {
	body, err := hex.DecodeString("01" + "3e11fa4771ca11e19e33c80aa9429562" + "2a00000000000000" +
		"02" + "0000000000000000" + "0100000000000000")
	if err != nil {
		t.Fatal(err)
	}
	ev := &replication.GTIDEvent{}
	if err := ev.Decode(body); err != nil {
		t.Fatal(err)
	}
	s := &Stream{schema: "app", table: "outbox_events", file: "binlog.000007"}
	if _, done, err := s.handle(&replication.BinlogEvent{Header: &replication.EventHeader{EventType: replication.GTID_EVENT, LogPos: 300}, Event: ev}); err != nil || done {
		t.Fatalf("GTID event: done %v, %v", done, err)
	}
	if s.gtid != "3e11fa47-71ca-11e1-9e33-c80aa9429562:42" {
		t.Fatalf("transaction GTID %q, want 3e11fa47-71ca-11e1-9e33-c80aa9429562:42", s.gtid)
	}
	s.ids = append(s.ids, 17)
	set, err := gomysql.ParseGTIDSet(gomysql.MySQLFlavor, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42")
	if err != nil {
		t.Fatal(err)
	}
	xid := &replication.BinlogEvent{Header: &replication.EventHeader{EventType: replication.XID_EVENT, LogPos: 1234},
		Event: &replication.XIDEvent{XID: 9, GSet: set}}
	tx, done, err := s.handle(xid)
	if err != nil || !done {
		t.Fatalf("XID event: done %v, %v", done, err)
	}
	want := Position{File: "binlog.000007", Offset: 1234, GTIDSet: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42"}
	if tx.Position != want || tx.GTID != "3e11fa47-71ca-11e1-9e33-c80aa9429562:42" || len(tx.IDs) != 1 {
		t.Fatalf("transaction %+v, want ids [17] at %+v", tx, want)
	}
	if _, err := gomysql.ParseGTIDSet(gomysql.MySQLFlavor, tx.Position.GTIDSet); err != nil {
		t.Fatalf("the saved GTID set %q does not parse back as MySQL's: %v", tx.Position.GTIDSet, err)
	}
	if p, idle := s.Idle(); !idle || p != want {
		t.Fatalf("Idle() = %v, %v after the commit, want %v, true", p, idle, want)
	}
}

func TestPositionOrder(t *testing.T) {
	for _, c := range []struct {
		p, q  Position
		after bool
	}{
		{Position{File: "mysql-bin.000002", Offset: 4}, Position{File: "mysql-bin.000001", Offset: 900}, true},
		{Position{File: "mysql-bin.1000000", Offset: 4}, Position{File: "mysql-bin.999999", Offset: 900}, true},
		{Position{File: "mysql-bin.000001", Offset: 900}, Position{File: "mysql-bin.000001", Offset: 900}, false},
		{Position{File: "mysql-bin.000001", Offset: 4}, Position{}, true},
	} {
		if got := c.p.after(c.q); got != c.after {
			t.Errorf("%s after %s = %v, want %v", c.p, c.q, got, c.after)
		}
	}
}
