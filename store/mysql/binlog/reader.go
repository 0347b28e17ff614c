package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store/mysql"
)

// Config configures a [Reader].
type Config struct {
	// DSN is the server's address and the replica user's credentials, in
	// a form store/mysql accepts (mysql://user:pass@host:3306/db, or
	// user:pass@tcp(host:3306)/db). Only TCP addresses are supported.
	DSN string
	// Schema is the table's database; empty means the DSN's database.
	Schema string
	// Table is the table whose inserts are streamed, e.g. "outbox". It
	// must have a single-column integer primary key.
	Table string
	// ServerID identifies the reader to the server as a replica. It must
	// differ from the server's server_id and from every other replica's
	// (a second replica with the same id disconnects the first). Zero
	// picks a random one above 2^31 for each Reader.
	ServerID uint32
	// Heartbeat is how often the server sends a heartbeat on an idle
	// stream; a stream with no event for three heartbeats ends with an
	// error. Zero means 10 seconds.
	Heartbeat time.Duration
	// Logger receives go-mysql's diagnostics; nil discards them.
	Logger *slog.Logger
}

// Reader reads one table's committed inserts from a server's binary log.
// It holds a connection pool to the server, for its checks and
// [Reader.CurrentPosition]; Close it when done.
type Reader struct {
	db       *sql.DB
	syncer   replication.BinlogSyncerConfig
	schema   string
	table    string
	pkColumn int // 0-based position of the primary key among the columns
}

// Open connects to the server of cfg.DSN, detects its flavour (MariaDB
// or MySQL, from SELECT VERSION()) and finds the table's primary-key
// column. It does not check the server's binary log settings: see
// [CheckServer].
func Open(ctx context.Context, cfg Config) (*Reader, error) {
	if strings.TrimSpace(cfg.Table) == "" {
		return nil, fmt.Errorf("%w: binlog: Config.Table is empty: name the table whose inserts to stream", outbox.ErrInvalidConfig)
	}
	dcfg, err := mysql.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, err
	}
	if dcfg.Net != "tcp" && dcfg.Net != "tcp6" {
		return nil, fmt.Errorf("%w: binlog: the DSN's address is %s(%s): the binary log is read over TCP only; give host:port", outbox.ErrInvalidConfig, dcfg.Net, dcfg.Addr)
	}
	host, portText, err := net.SplitHostPort(dcfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("%w: binlog: the DSN's address %q: %v", outbox.ErrInvalidConfig, dcfg.Addr, err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("%w: binlog: the DSN's port %q is not a port number", outbox.ErrInvalidConfig, portText)
	}
	schema := cfg.Schema
	if schema == "" {
		schema = dcfg.DBName
	}
	if schema == "" {
		return nil, fmt.Errorf("%w: binlog: no database for table %s: set Config.Schema or put the database in the DSN", outbox.ErrInvalidConfig, cfg.Table)
	}
	connector, err := mysqldrv.NewConnector(dcfg)
	if err != nil {
		return nil, fmt.Errorf("%w: binlog: %v", outbox.ErrInvalidConfig, err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(2)
	r := &Reader{db: db, schema: schema, table: cfg.Table}
	flavor, serverID, err := serverIdentity(ctx, db)
	if err == nil {
		r.pkColumn, err = primaryKeyColumn(ctx, db, schema, cfg.Table)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	id := cfg.ServerID
	for id == 0 || id == serverID {
		id = 1<<31 + rand.Uint32N(1<<31-1)
	}
	heartbeat := cfg.Heartbeat
	if heartbeat <= 0 {
		heartbeat = 10 * time.Second
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r.syncer = replication.BinlogSyncerConfig{
		ServerID:         id,
		Flavor:           flavor,
		Host:             host,
		Port:             uint16(port),
		User:             dcfg.User,
		Password:         dcfg.Passwd,
		TLSConfig:        dcfg.TLS,
		HeartbeatPeriod:  heartbeat,
		ReadTimeout:      3 * heartbeat,
		DisableRetrySync: true, // the caller restarts from its own position
		Logger:           logger,
		VerifyChecksum:   true,
		// MariaDB 11.4+ sends events it skips for a replica that does not
		// take Annotate_rows events with a log position of 0; with this,
		// the replica takes them and go-mysql fills the positions in.
		FillZeroLogPos: flavor == gomysql.MariaDBFlavor,
	}
	return r, nil
}

// ServerID returns the replica server id the reader uses.
func (r *Reader) ServerID() uint32 { return r.syncer.ServerID }

// Flavor returns "mariadb" or "mysql".
func (r *Reader) Flavor() string { return r.syncer.Flavor }

// CurrentPosition returns the server's current end of the binary log, a
// position to start a stream from that yields what commits next.
func (r *Reader) CurrentPosition(ctx context.Context) (Position, error) {
	return CurrentPosition(ctx, r.db)
}

// Close closes the reader's connection pool. Streams it started are
// closed with [Stream.Close].
func (r *Reader) Close() error { return r.db.Close() }

// Start starts a stream of the table's committed inserts after pos: from
// pos.GTIDSet if it is set, else from pos.File at pos.Offset. A position
// the server no longer has is reported by the stream's first
// [Stream.Next] (or by Start) as an error matching [ErrPositionPurged].
func (r *Reader) Start(ctx context.Context, pos Position) (*Stream, error) {
	if pos.GTIDSet == "" && pos.File == "" {
		return nil, fmt.Errorf("%w: binlog: the start position has no file and no GTID set: start from a position a stream yielded or from Reader.CurrentPosition", outbox.ErrInvalidConfig)
	}
	if pos.GTIDSet == "" && pos.Offset < 4 {
		pos.Offset = 4 // a file's first event
	}
	syncer := replication.NewBinlogSyncer(r.syncer)
	s := &Stream{syncer: syncer, schema: r.schema, table: r.table, pkColumn: r.pkColumn, file: pos.File}
	var err error
	if pos.GTIDSet != "" {
		var set gomysql.GTIDSet
		set, err = gomysql.ParseGTIDSet(r.syncer.Flavor, pos.GTIDSet)
		if err != nil {
			syncer.Close()
			return nil, fmt.Errorf("%w: binlog: the start position's GTID set %q is not a %s GTID set: %v", outbox.ErrInvalidConfig, pos.GTIDSet, r.syncer.Flavor, err)
		}
		s.streamer, err = syncer.StartSyncGTID(set)
	} else {
		s.streamer, err = syncer.StartSync(gomysql.Position{Name: pos.File, Pos: pos.Offset})
	}
	if err != nil {
		syncer.Close()
		return nil, streamError(err, pos)
	}
	s.start = pos
	return s, nil
}

// serverIdentity returns the server's flavour for go-mysql and its
// server_id.
func serverIdentity(ctx context.Context, db *sql.DB) (flavor string, serverID uint32, err error) {
	var version string
	var id sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT VERSION(), @@GLOBAL.server_id").Scan(&version, &id); err != nil {
		return "", 0, fmt.Errorf("binlog: read the server's version: %w", err)
	}
	flavor = gomysql.MySQLFlavor
	if isMariaDB(version) {
		flavor = gomysql.MariaDBFlavor
	}
	return flavor, uint32(id.Int64), nil
}

func isMariaDB(version string) bool {
	return strings.Contains(strings.ToLower(version), "mariadb")
}

// primaryKeyColumn returns the 0-based position, among the table's
// columns, of its single-column primary key.
func primaryKeyColumn(ctx context.Context, db *sql.DB, schema, table string) (int, error) {
	rows, err := db.QueryContext(ctx, `
SELECT c.ORDINAL_POSITION, c.DATA_TYPE
FROM information_schema.KEY_COLUMN_USAGE k
JOIN information_schema.COLUMNS c
  ON c.TABLE_SCHEMA = k.TABLE_SCHEMA AND c.TABLE_NAME = k.TABLE_NAME AND c.COLUMN_NAME = k.COLUMN_NAME
WHERE k.TABLE_SCHEMA = ? AND k.TABLE_NAME = ? AND k.CONSTRAINT_NAME = 'PRIMARY'`, schema, table)
	if err != nil {
		return 0, fmt.Errorf("binlog: read the primary key of %s.%s: %w", schema, table, err)
	}
	defer rows.Close()
	var positions []int
	var types []string
	for rows.Next() {
		var p int
		var t string
		if err := rows.Scan(&p, &t); err != nil {
			return 0, fmt.Errorf("binlog: read the primary key of %s.%s: %w", schema, table, err)
		}
		positions, types = append(positions, p), append(types, strings.ToLower(t))
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("binlog: read the primary key of %s.%s: %w", schema, table, err)
	}
	switch {
	case len(positions) == 0:
		return 0, fmt.Errorf("%w: binlog: table %s.%s does not exist or has no primary key (check Config.Schema and Config.Table, and that the DSN's user can see the table)", outbox.ErrInvalidConfig, schema, table)
	case len(positions) > 1:
		return 0, fmt.Errorf("%w: binlog: table %s.%s has a primary key of %d columns; the reader needs a single integer column (the outbox table's id)", outbox.ErrInvalidConfig, schema, table, len(positions))
	}
	switch types[0] {
	case "tinyint", "smallint", "mediumint", "int", "integer", "bigint":
	default:
		return 0, fmt.Errorf("%w: binlog: the primary key of %s.%s is a %s; the reader needs an integer column (the outbox table's id)", outbox.ErrInvalidConfig, schema, table, types[0])
	}
	return positions[0] - 1, nil
}

// ErrPositionPurged is matched (errors.Is) by the error of a stream whose
// start position the server does not have any more: its binary log file
// was purged (PURGE BINARY LOGS, binlog_expire_logs_seconds,
// expire_logs_days) or never existed, or, for a GTID set, the
// transactions after it are no longer in any file. Events committed
// since are lost to the binary log: the caller must fall back to reading
// the table.
var ErrPositionPurged = errors.New("binlog: the start position is no longer in the server's binary log")

// streamError turns a go-mysql error into the package's: ErrPositionPurged
// for a start position the server does not have.
func streamError(err error, start Position) error {
	var my *gomysql.MyError
	if errors.As(err, &my) && my.Code == gomysql.ER_MASTER_FATAL_ERROR_READING_BINLOG {
		msg := strings.ToLower(my.Message)
		if strings.Contains(msg, "could not find") || strings.Contains(msg, "purged") {
			return fmt.Errorf("%w: %s (server error 1236: %s)", ErrPositionPurged, start, my.Message)
		}
		return fmt.Errorf("binlog: the server cannot send its binary log from %s (server error 1236: %s)", start, my.Message)
	}
	if errors.As(err, &my) {
		return fmt.Errorf("binlog: stream from %s: server error %d: %s", start, my.Code, my.Message)
	}
	return fmt.Errorf("binlog: stream from %s: %w", start, err)
}
