package binlog

import (
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"
)

// Event bodies a MySQL server wrote, as recorded in the tests of
// go-mysql v1.13.0 (replication/event_test.go):
//
//   - mysql80GTIDEvent: a GTID_LOG_EVENT of MySQL 8.0.19 (its
//     immediate_server_version field reads 80019; commit timestamp
//     1583813191872618), TestGTIDEventMysql8NewFields's case "mysql-8.0
//     only": transaction 5ccc1033-44a8-11ea-bd59-0242ac190003:119.
//   - mysqlPreviousGTIDs: a PREVIOUS_GTIDS_LOG_EVENT,
//     TestPreviousGTIDEvent's second case: the set
//     896e7882-18fe-11ef-ab88-22222d34d411:1-3.
var (
	mysql80GTIDEvent   = []byte("\x00\\\xcc\x103D\xa8\x11\xea\xbdY\x02B\xac\x19\x00\x03w\x00\x00\x00\x00\x00\x00\x00\x02x\x00\x00\x00\x00\x00\x00\x00y\x00\x00\x00\x00\x00\x00\x00j0\xb1>x\xa0\x05\xfc\xc3\x03\x938\x01\x00")
	mysqlPreviousGTIDs = []byte{0x1, 0x1, 0x0, 0x0, 0x0, 0x0, 0x0, 0x1, 0x89, 0x6e, 0x78, 0x82, 0x18, 0xfe, 0x11, 0xef, 0xab, 0x88, 0x22,
		0x22, 0x2d, 0x34, 0xd4, 0x11, 0x0, 0x1, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x1, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x4,
		0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0}
)

// The stream decodes MySQL's GTID path from events a MySQL server wrote:
// the GTID event names the transaction, and the commit's position carries
// the GTID set go-mysql's syncer builds as it does on a live stream (the
// file's PREVIOUS_GTIDS set plus each GTID event's transaction), which
// parses back as a MySQL GTID set to resume from.
func TestMySQLGTIDFromRecordedEvents(t *testing.T) {
	prev := &replication.PreviousGTIDsEvent{}
	if err := prev.Decode(mysqlPreviousGTIDs); err != nil {
		t.Fatalf("decode the recorded PREVIOUS_GTIDS event: %v", err)
	}
	gset, err := gomysql.ParseGTIDSet(gomysql.MySQLFlavor, prev.GTIDSets)
	if err != nil {
		t.Fatalf("the recorded PREVIOUS_GTIDS set %q: %v", prev.GTIDSets, err)
	}
	ev := &replication.GTIDEvent{}
	if err := ev.Decode(mysql80GTIDEvent); err != nil {
		t.Fatalf("decode the recorded GTID event: %v", err)
	}
	if ev.ImmediateServerVersion != 80019 {
		t.Fatalf("the recorded GTID event names server version %d, want 80019", ev.ImmediateServerVersion)
	}
	s := &Stream{schema: "app", table: "outbox_events", file: "binlog.000007"}
	if _, done, err := s.handle(&replication.BinlogEvent{Header: &replication.EventHeader{EventType: replication.PREVIOUS_GTIDS_EVENT, LogPos: 155}, Event: prev}); err != nil || done {
		t.Fatalf("PREVIOUS_GTIDS event: done %v, %v", done, err)
	}
	if _, done, err := s.handle(&replication.BinlogEvent{Header: &replication.EventHeader{EventType: replication.GTID_EVENT, LogPos: 300}, Event: ev}); err != nil || done {
		t.Fatalf("GTID event: done %v, %v", done, err)
	}
	const wantGTID = "5ccc1033-44a8-11ea-bd59-0242ac190003:119"
	if s.gtid != wantGTID {
		t.Fatalf("transaction GTID %q, want %s", s.gtid, wantGTID)
	}
	u, err := uuid.FromBytes(ev.SID)
	if err != nil {
		t.Fatal(err)
	}
	gset.(*gomysql.MysqlGTIDSet).AddGTID(u, ev.GNO)
	s.ids = append(s.ids, 17)
	xid := &replication.BinlogEvent{Header: &replication.EventHeader{EventType: replication.XID_EVENT, LogPos: 1234},
		Event: &replication.XIDEvent{XID: 9, GSet: gset}}
	tx, done, err := s.handle(xid)
	if err != nil || !done {
		t.Fatalf("XID event: done %v, %v", done, err)
	}
	const wantSet = "5ccc1033-44a8-11ea-bd59-0242ac190003:119,896e7882-18fe-11ef-ab88-22222d34d411:1-3"
	want := Position{File: "binlog.000007", Offset: 1234, GTIDSet: wantSet}
	if tx.Position != want || tx.GTID != wantGTID || len(tx.IDs) != 1 || tx.IDs[0] != 17 {
		t.Fatalf("transaction %+v, want ids [17] at %+v", tx, want)
	}
	back, err := gomysql.ParseGTIDSet(gomysql.MySQLFlavor, tx.Position.GTIDSet)
	if err != nil {
		t.Fatalf("the saved GTID set %q does not parse back as MySQL's: %v", tx.Position.GTIDSet, err)
	}
	if !back.Equal(gset) {
		t.Fatalf("the saved GTID set parses back as %s, want %s", back, gset)
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
