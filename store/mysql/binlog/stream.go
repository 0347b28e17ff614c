package binlog

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/go-mysql-org/go-mysql/replication"
)

// Transaction is one committed transaction that inserted rows into the
// reader's table.
type Transaction struct {
	// IDs are the primary keys of the rows it inserted into the table, in
	// binary log order.
	IDs []int64
	// Position is just after the transaction's commit: a stream started
	// from it yields the transactions committed after this one.
	Position Position
	// GTID is the transaction's own global transaction id, when the
	// server logs one (MariaDB: "0-1-42"; MySQL: "uuid:42").
	GTID string
}

// Stream yields the committed inserts into one table, a transaction at a
// time. It is not safe for concurrent use.
type Stream struct {
	syncer   *replication.BinlogSyncer
	streamer *replication.BinlogStreamer
	schema   string
	table    string
	pkColumn int
	start    Position

	file string // the binary log file being read
	ids  []int64
	gtid string
	open bool     // a transaction has begun and not yet ended
	last Position // just after the last transaction that ended
}

// Next blocks until the next committed transaction that inserted rows
// into the table, and returns it. It returns ctx's error when ctx ends,
// an error matching [ErrPositionPurged] when the start position is gone,
// and any other error of the server or the connection: the stream is
// then over, and the caller starts a new one from the last position it
// handled.
func (s *Stream) Next(ctx context.Context) (Transaction, error) {
	for {
		ev, err := s.streamer.GetEvent(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return Transaction{}, ctx.Err()
			}
			return Transaction{}, streamError(err, s.start)
		}
		tx, done, err := s.handle(ev)
		if err != nil {
			return Transaction{}, err
		}
		if done {
			return tx, nil
		}
	}
}

// Idle returns the position just after the last transaction the stream
// read to its end (one that inserted nothing into the table included),
// and whether the stream is between transactions there: every
// transaction before it that inserted into the table was yielded by Next.
// Call it between calls of Next (for example after Next returned the
// error of a context whose deadline passed); the zero Position before the
// first commit.
func (s *Stream) Idle() (Position, bool) { return s.last, !s.open && !s.last.IsZero() }

// Close ends the stream and its connection.
func (s *Stream) Close() { s.syncer.Close() }

// handle takes one event in; done is true when it commits a transaction
// with inserts into the table.
func (s *Stream) handle(ev *replication.BinlogEvent) (tx Transaction, done bool, err error) {
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		// Also sent first, by the server, naming the file it starts from.
		s.file = string(e.NextLogName)
	case *replication.MariadbGTIDEvent:
		s.begin(e.GTID.String())
	case *replication.GTIDEvent:
		s.begin(mysqlGTID(e))
	case *replication.QueryEvent:
		switch string(e.Query) {
		case "BEGIN":
			s.begin(s.gtid)
			s.open = true
		case "COMMIT": // a non-transactional table's commit
			return s.commit(ev, e.GSet)
		case "ROLLBACK":
			s.begin("")
		}
	case *replication.XIDEvent:
		return s.commit(ev, e.GSet)
	case *replication.TransactionPayloadEvent:
		return s.handlePayload(ev, e)
	case *replication.RowsEvent:
		if !isInsert(ev.Header.EventType) || e.Table == nil ||
			string(e.Table.Schema) != s.schema || string(e.Table.Table) != s.table {
			return tx, false, nil
		}
		for _, row := range e.Rows {
			id, err := s.rowID(row)
			if err != nil {
				return tx, false, err
			}
			s.ids = append(s.ids, id)
		}
	}
	return tx, false, nil
}

// handlePayload takes in the events of a MySQL 8 compressed transaction
// (binlog_transaction_compression=ON), which end with its commit; their
// own log positions are 0, and the commit's position is the payload's.
// go-mysql gives such a commit no GTID set, so its Position has none.
func (s *Stream) handlePayload(ev *replication.BinlogEvent, payload *replication.TransactionPayloadEvent) (Transaction, bool, error) {
	for _, inner := range payload.Events {
		if inner.Header.EventType == replication.XID_EVENT || isCommitQuery(inner) {
			header := *inner.Header
			header.LogPos = ev.Header.LogPos
			inner = &replication.BinlogEvent{RawData: inner.RawData, Header: &header, Event: inner.Event}
		}
		if tx, done, err := s.handle(inner); err != nil || done {
			return tx, done, err
		}
	}
	return Transaction{}, false, nil
}

func isCommitQuery(ev *replication.BinlogEvent) bool {
	q, ok := ev.Event.(*replication.QueryEvent)
	return ok && string(q.Query) == "COMMIT"
}

func (s *Stream) begin(gtid string) {
	s.ids = s.ids[:0]
	s.gtid = gtid
	s.open = gtid != ""
}

func (s *Stream) commit(ev *replication.BinlogEvent, gset fmt.Stringer) (Transaction, bool, error) {
	if len(s.ids) == 0 {
		s.gtid, s.open = "", false
		if ev.Header.LogPos != 0 && s.file != "" {
			s.last = Position{File: s.file, Offset: ev.Header.LogPos}
			if gset != nil {
				s.last.GTIDSet = gset.String()
			}
		}
		return Transaction{}, false, nil
	}
	if ev.Header.LogPos == 0 || s.file == "" {
		return Transaction{}, false, fmt.Errorf("binlog: the server sent the commit of %s.%s's transaction %s without its binary log position (file %q, offset 0): positions cannot be trusted on this server", s.schema, s.table, s.gtid, s.file)
	}
	tx := Transaction{
		IDs:      append([]int64(nil), s.ids...),
		Position: Position{File: s.file, Offset: ev.Header.LogPos},
		GTID:     s.gtid,
	}
	if gset != nil {
		tx.Position.GTIDSet = gset.String()
	}
	s.begin("")
	s.last = tx.Position
	return tx, true, nil
}

// rowID is the row's primary key as an int64.
func (s *Stream) rowID(row []any) (int64, error) {
	if s.pkColumn >= len(row) {
		return 0, fmt.Errorf("binlog: a row of %s.%s has %d columns, and its primary key is column %d: the table changed since the reader was opened; open it again", s.schema, s.table, len(row), s.pkColumn+1)
	}
	switch v := row[s.pkColumn].(type) {
	case int8:
		return int64(v), nil
	case int16:
		return int64(v), nil
	case int32:
		return int64(v), nil
	case int64:
		return v, nil
	case uint8:
		return int64(v), nil
	case uint16:
		return int64(v), nil
	case uint32:
		return int64(v), nil
	case uint64:
		if v > math.MaxInt64 {
			return 0, fmt.Errorf("binlog: a row of %s.%s has the primary key %d, beyond int64", s.schema, s.table, v)
		}
		return int64(v), nil
	}
	return 0, fmt.Errorf("binlog: a row of %s.%s has a primary key of type %T, not an integer: the table changed since the reader was opened; open it again", s.schema, s.table, row[s.pkColumn])
}

func isInsert(t replication.EventType) bool {
	switch t {
	case replication.WRITE_ROWS_EVENTv0, replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2,
		replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1:
		return true
	}
	return false
}

func mysqlGTID(e *replication.GTIDEvent) string {
	if len(e.SID) != 16 {
		return ""
	}
	const hex = "0123456789abcdef"
	b := make([]byte, 0, 36)
	for i, c := range e.SID {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hex[c>>4], hex[c&0xf])
	}
	return string(b) + ":" + strconv.FormatInt(e.GNO, 10)
}
