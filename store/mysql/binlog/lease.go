package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/txoutbox/outbox/internal/cdctrack"
)

// The source keeps two small tables next to the outbox table, created by
// New when they are missing (and dropped by `outbox migrate --down`):
//
//   - <table>_cdc_lease, the same lease as PostgreSQL's --source logical:
//     the row of a stream names the one relay that reads it;
//   - <table>_cdc_position, the position the stream resumes from: saved
//     only once every event of the transactions before it is recorded.
//
// A stream's rows are keyed by its name, <table>_binlog.

// ensureTables creates the lease and position tables when they are
// missing.
func ensureTables(ctx context.Context, db *sql.DB, table string) error {
	for _, q := range []string{
		"CREATE TABLE IF NOT EXISTS " + quoteName(table+"_cdc_lease") + ` (
    slot       VARCHAR(63)  NOT NULL PRIMARY KEY,
    holder     VARCHAR(200) NOT NULL,
    expires_at DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`,
		"CREATE TABLE IF NOT EXISTS " + quoteName(table+"_cdc_position") + ` (
    slot          VARCHAR(63)   NOT NULL PRIMARY KEY,
    binlog_file   VARCHAR(255)  NOT NULL,
    binlog_offset BIGINT        NOT NULL,
    gtid_set      VARCHAR(4096) NOT NULL DEFAULT '',
    saved_at      DATETIME(6)   NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("binlog: create the source's table (the relay's user needs CREATE on the outbox's database, or run `outbox relay --source binlog` once as a user that has it): %w", err)
		}
	}
	return nil
}

// DropTables removes the lease and position tables of the outbox table
// (`outbox migrate --down`).
func DropTables(ctx context.Context, db *sql.DB, table string) error {
	for _, t := range []string{table + "_cdc_lease", table + "_cdc_position"} {
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+quoteName(t)); err != nil {
			return fmt.Errorf("binlog: drop %s: %w", t, err)
		}
	}
	return nil
}

func quoteName(s string) string { return "`" + s + "`" }

// streamLease is the row in <table>_cdc_lease that names the one relay
// reading a stream. The holder renews it every third of its length; the
// others try to take it at the same pace and get it once it ended.
type streamLease struct {
	db     *sql.DB
	table  string // quoted lease table
	slot   string
	holder string
	length time.Duration
}

// acquire takes or renews the lease; false when another holder has it.
func (l *streamLease) acquire(ctx context.Context) (bool, error) {
	us := l.length.Microseconds()
	if _, err := l.db.ExecContext(ctx, "INSERT IGNORE INTO "+l.table+
		" (slot, holder, expires_at) VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)", l.slot, l.holder, us); err != nil {
		return false, fmt.Errorf("binlog: take the stream lease %s: %w", l.slot, err)
	}
	if _, err := l.db.ExecContext(ctx, "UPDATE "+l.table+
		" SET holder = ?, expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE slot = ? AND (holder = ? OR expires_at < UTC_TIMESTAMP(6))",
		l.holder, us, l.slot, l.holder); err != nil {
		return false, fmt.Errorf("binlog: take the stream lease %s: %w", l.slot, err)
	}
	var holder string
	err := l.db.QueryRowContext(ctx, "SELECT holder FROM "+l.table+" WHERE slot = ?", l.slot).Scan(&holder)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("binlog: read the stream lease %s: %w", l.slot, err)
	}
	return holder == l.holder, nil
}

// release gives the lease up at a clean stop, so a standby takes over at once.
func (l *streamLease) release(ctx context.Context) {
	_, _ = l.db.ExecContext(ctx, "DELETE FROM "+l.table+" WHERE slot = ? AND holder = ?", l.slot, l.holder)
}

// keep renews the lease until ctx ends; it calls lost (once) when a renewal
// finds another holder or when renewals fail until the lease would have
// ended.
func (l *streamLease) keep(ctx context.Context, lost func()) {
	cdctrack.KeepLease(ctx, l.length, l.acquire, lost)
}

// positionStore reads and saves a stream's row of <table>_cdc_position.
type positionStore struct {
	db    *sql.DB
	table string // quoted position table
	lease string // quoted lease table
	slot  string
}

// load returns the saved position; ok is false when none was saved.
func (p positionStore) load(ctx context.Context) (pos Position, ok bool, err error) {
	var off int64
	err = p.db.QueryRowContext(ctx, "SELECT binlog_file, binlog_offset, gtid_set FROM "+p.table+" WHERE slot = ?", p.slot).
		Scan(&pos.File, &off, &pos.GTIDSet)
	if errors.Is(err, sql.ErrNoRows) {
		return Position{}, false, nil
	}
	if err != nil {
		return Position{}, false, fmt.Errorf("binlog: read the saved position of %s: %w", p.slot, err)
	}
	pos.Offset = uint32(off)
	return pos, true, nil
}

// save stores pos while holder holds the stream lease; false when it does
// not (another relay took the stream over, and saves its own).
func (p positionStore) save(ctx context.Context, pos Position, holder string) (bool, error) {
	res, err := p.db.ExecContext(ctx, "INSERT INTO "+p.table+
		" (slot, binlog_file, binlog_offset, gtid_set, saved_at) SELECT ?, ?, ?, ?, UTC_TIMESTAMP(6) FROM "+p.lease+
		" WHERE slot = ? AND holder = ? ON DUPLICATE KEY UPDATE binlog_file = VALUES(binlog_file),"+
		" binlog_offset = VALUES(binlog_offset), gtid_set = VALUES(gtid_set), saved_at = VALUES(saved_at)",
		p.slot, pos.File, int64(pos.Offset), pos.GTIDSet, p.slot, holder)
	if err != nil {
		return false, fmt.Errorf("binlog: save the position of %s: %w", p.slot, err)
	}
	n, err := res.RowsAffected()
	return err == nil && n > 0, nil
}

// SavedPosition is what `outbox status` shows of a binlog stream.
type SavedPosition struct {
	Slot     string
	Exists   bool
	Position Position
	SavedAt  time.Time
	Holder   string // the relay holding the stream lease, "" when none
	// LagBytes is how much binary log the server has written after the
	// saved position (its files' sizes), -1 when it could not be read.
	LagBytes int64
}

// ReadSaved reads the saved position of the outbox table's binlog stream,
// its lease holder and its lag. A missing table or row is reported with
// Exists false.
func ReadSaved(ctx context.Context, db *sql.DB, table string) (SavedPosition, error) {
	s := SavedPosition{Slot: table + "_binlog", LagBytes: -1}
	var off int64
	var saved nullTime
	err := db.QueryRowContext(ctx, "SELECT p.binlog_file, p.binlog_offset, p.gtid_set, p.saved_at, COALESCE(l.holder, '') FROM "+
		quoteName(table+"_cdc_position")+" p LEFT JOIN "+quoteName(table+"_cdc_lease")+
		" l ON l.slot = p.slot AND l.expires_at >= UTC_TIMESTAMP(6) WHERE p.slot = ?", s.Slot).
		Scan(&s.Position.File, &off, &s.Position.GTIDSet, &saved, &s.Holder)
	if errors.Is(err, sql.ErrNoRows) || isMissingTable(err) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("binlog: read the saved position of %s: %w", s.Slot, err)
	}
	s.Exists, s.SavedAt, s.Position.Offset = true, saved.t, uint32(off)
	if n, err := LagBytes(ctx, db, s.Position); err == nil {
		s.LagBytes = n
	}
	return s, nil
}

// LagBytes is how many bytes of binary log the server holds after pos:
// the rest of pos's file and every later file (SHOW BINARY LOGS, which
// needs REPLICATION CLIENT or BINLOG MONITOR).
func LagBytes(ctx context.Context, db *sql.DB, pos Position) (int64, error) {
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	var lag int64
	for rows.Next() {
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return 0, err
		}
		var size int64
		if _, err := fmt.Sscan(string(vals[1]), &size); err != nil {
			return 0, err
		}
		f := Position{File: string(vals[0])}
		switch {
		case f.File == pos.File:
			lag += max(0, size-int64(pos.Offset))
		case f.after(pos):
			lag += size
		}
	}
	return lag, rows.Err()
}

// nullTime scans a DATETIME(6) that the driver returns as text or time.
type nullTime struct{ t time.Time }

func (n *nullTime) Scan(v any) error {
	switch x := v.(type) {
	case nil:
	case time.Time:
		n.t = x
	case []byte:
		t, err := time.Parse("2006-01-02 15:04:05.999999", string(x))
		if err != nil {
			return err
		}
		n.t = t
	default:
		return fmt.Errorf("binlog: a DATETIME came as %T", v)
	}
	return nil
}

// isMissingTable reports MySQL's error 1146 (no such table).
func isMissingTable(err error) bool {
	var me *mysqldrv.MySQLError
	return errors.As(err, &me) && me.Number == 1146
}
