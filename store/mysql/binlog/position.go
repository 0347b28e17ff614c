package binlog

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
)

// Position is a place in the server's binary log: a file and the byte
// offset in it where the next event starts, and, where the server has
// global transaction ids, the GTID set of the transactions up to there.
type Position struct {
	File   string // e.g. mysql-bin.000003
	Offset uint32 // 4 is a file's first event
	// GTIDSet is the set of transactions committed up to this position,
	// in the server's flavour (MariaDB: "0-1-42"; MySQL:
	// "uuid:1-42"). A stream started with a GTIDSet starts from it and
	// ignores File and Offset; a stream started from a file and offset
	// yields positions without one.
	GTIDSet string
}

// String renders the position as file:offset, followed by the GTID set
// if there is one, or as the GTID set alone when there is no file.
func (p Position) String() string {
	if p.File == "" {
		return "GTID set " + p.GTIDSet
	}
	s := p.File + ":" + strconv.FormatUint(uint64(p.Offset), 10)
	if p.GTIDSet != "" {
		s += " (" + p.GTIDSet + ")"
	}
	return s
}

// IsZero reports whether p is the zero Position.
func (p Position) IsZero() bool { return p == Position{} }

// CurrentPosition returns the server's current end of the binary log:
// SHOW BINLOG STATUS on MariaDB 10.5.2+, SHOW BINARY LOG STATUS on MySQL
// 8.2+, SHOW MASTER STATUS on older servers, with the GTID set of
// @@gtid_binlog_pos (MariaDB) or @@gtid_executed (MySQL) when the server
// has one. It needs REPLICATION CLIENT (BINLOG MONITOR).
func CurrentPosition(ctx context.Context, db *sql.DB) (Position, error) {
	var last error
	for _, q := range []string{"SHOW BINLOG STATUS", "SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"} {
		p, err := binlogStatus(ctx, db, q)
		if err == nil {
			p.GTIDSet = currentGTIDSet(ctx, db)
			return p, nil
		}
		last = err
	}
	return Position{}, fmt.Errorf("binlog: read the current binary log position: %w", last)
}

func binlogStatus(ctx context.Context, db *sql.DB, query string) (Position, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return Position{}, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return Position{}, err
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return Position{}, err
		}
		return Position{}, fmt.Errorf("%s returned no row: the binary log is off (start the server with --log-bin)", query)
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return Position{}, err
	}
	if len(vals) < 2 {
		return Position{}, fmt.Errorf("%s returned %d columns, want at least 2", query, len(vals))
	}
	off, err := strconv.ParseUint(string(vals[1]), 10, 32)
	if err != nil {
		return Position{}, fmt.Errorf("%s: position %q: %w", query, vals[1], err)
	}
	return Position{File: string(vals[0]), Offset: uint32(off)}, nil
}

// currentGTIDSet is the server's GTID set, or "" when it has none or
// does not say.
func currentGTIDSet(ctx context.Context, db *sql.DB) string {
	var mariadb bool
	var version string
	if db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version) == nil {
		mariadb = isMariaDB(version)
	}
	query := "SELECT @@GLOBAL.gtid_executed"
	if mariadb {
		query = "SELECT @@GLOBAL.gtid_binlog_pos"
	}
	var set sql.NullString
	if db.QueryRowContext(ctx, query).Scan(&set) != nil {
		return ""
	}
	return set.String
}

// after reports whether p is later in the binary log than q, by file
// (the number after the last dot, then the name) and offset. The zero
// Position is before every other.
func (p Position) after(q Position) bool {
	if p.File != q.File {
		pn, pok := fileNumber(p.File)
		qn, qok := fileNumber(q.File)
		if pok && qok && pn != qn {
			return pn > qn
		}
		return p.File > q.File
	}
	return p.Offset > q.Offset
}

// fileNumber is the sequence number of a binary log file name such as
// mysql-bin.000042.
func fileNumber(name string) (uint64, bool) {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(name[i+1:], 10, 64)
	return n, err == nil
}
