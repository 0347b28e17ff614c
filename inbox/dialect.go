package inbox

import (
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/pressly/goose/v3/database"

	"github.com/txoutbox/outbox"
)

// Dialect is the SQL dialect of the consumer's database.
type Dialect int

const (
	// DetectDialect (the zero value) makes New find the dialect from the
	// driver of the *sql.DB: pgx's stdlib and lib/pq, go-sql-driver/mysql,
	// modernc.org/sqlite.
	DetectDialect Dialect = iota
	// PostgreSQL 14 or later.
	PostgreSQL
	// MySQL is MySQL 8 and MariaDB 10.6 or later (InnoDB).
	MySQL
	// SQLite through modernc.org/sqlite (3.42 or later).
	SQLite
)

func (d Dialect) String() string {
	switch d {
	case PostgreSQL:
		return "postgresql"
	case MySQL:
		return "mysql"
	case SQLite:
		return "sqlite"
	}
	return "detect"
}

// detectDialect names the dialect of db's driver by the driver's type.
func detectDialect(db *sql.DB) (Dialect, error) {
	t := reflect.TypeOf(db.Driver())
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch path := t.PkgPath(); {
	case strings.HasPrefix(path, "github.com/jackc/pgx"), path == "github.com/lib/pq":
		return PostgreSQL, nil
	case path == "github.com/go-sql-driver/mysql":
		return MySQL, nil
	case path == "modernc.org/sqlite":
		return SQLite, nil
	default:
		return 0, fmt.Errorf("%w: inbox cannot tell the SQL dialect of the driver %s.%s: set Config.Dialect to inbox.PostgreSQL, inbox.MySQL or inbox.SQLite",
			outbox.ErrInvalidConfig, path, t.Name())
	}
}

// DefaultTable is the inbox table name used when none is configured.
const DefaultTable = "inbox"

// MaxTableLen is the longest inbox table name: the companion names
// (<table>_schema_migrations, <table>_sequences, their indexes) must fit
// in PostgreSQL's 63 characters.
const MaxTableLen = 63 - len("_schema_migrations")

var tableRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidateTable checks an inbox table name: a letter or _ first, then
// lower-case letters, digits and _, at most MaxTableLen characters. Names
// are checked (and then quoted) so that nothing from configuration is
// pasted into SQL as it is.
func ValidateTable(name string) error {
	if !tableRE.MatchString(name) {
		return fmt.Errorf("%w: inbox table name %q is not allowed: use a-z, 0-9 and _, starting with a letter or _ (for example payment_inbox)",
			outbox.ErrInvalidConfig, name)
	}
	if len(name) > MaxTableLen {
		return fmt.Errorf("%w: inbox table name %q is %d characters long: use at most %d, so that %s_schema_migrations fits in 63",
			outbox.ErrInvalidConfig, name, len(name), MaxTableLen, name)
	}
	return nil
}

// Tables are the names of an inbox's tables and indexes, unquoted.
type Tables struct {
	Inbox          string // event ids and stored responses: <table>
	InboxIndex     string // <table>_recorded_idx
	Sequences      string // the last sequence per aggregate: <table>_sequences
	SequencesIndex string // <table>_sequences_idx
	Migrations     string // the applied schema versions: <table>_schema_migrations
}

// TablesFor validates name (empty means DefaultTable) and derives the
// companion names.
func TablesFor(name string) (Tables, error) {
	if name == "" {
		name = DefaultTable
	}
	if err := ValidateTable(name); err != nil {
		return Tables{}, err
	}
	return Tables{
		Inbox:          name,
		InboxIndex:     name + "_recorded_idx",
		Sequences:      name + "_sequences",
		SequencesIndex: name + "_sequences_idx",
		Migrations:     name + "_schema_migrations",
	}, nil
}

// quoted returns t with every name quoted for d.
func (t Tables) quoted(d Dialect) Tables {
	q := func(s string) string { return `"` + s + `"` }
	if d == MySQL {
		q = func(s string) string { return "`" + s + "`" }
	}
	return Tables{
		Inbox: q(t.Inbox), InboxIndex: q(t.InboxIndex),
		Sequences: q(t.Sequences), SequencesIndex: q(t.SequencesIndex),
		Migrations: q(t.Migrations),
	}
}

// queries are the statements of one inbox in one dialect.
type queries struct {
	// record inserts (consumer, event_id) unless present: one row affected
	// when it was new, none for a duplicate.
	record string
	// sequence upserts (consumer, aggregate_type, aggregate_id, seq) and,
	// with sequenceRead empty, returns the previous highest sequence.
	sequence     string
	sequenceRead string // MySQL: reads prev_seq after sequence
	saveResponse string // (consumer, event_id, status, content type, body)
	loadResponse string // (consumer, event_id) -> status, content type, body
	// cleanIDs and cleanSequences delete one page: (age in microseconds,
	// page size).
	cleanIDs       string
	cleanSequences string
	// count counts an inbox's ids (for tests and the missing-table probe).
	count string
}

func newQueries(d Dialect, t Tables) queries {
	q := t.quoted(d)
	key := " WHERE consumer = ? AND event_id = ?"
	seqKey := " WHERE consumer = ? AND aggregate_type = ? AND aggregate_id = ?"
	var out queries
	switch d {
	case PostgreSQL:
		out = queries{
			record: `INSERT INTO ` + q.Inbox + ` (consumer, event_id, recorded_at) VALUES ($1, $2, now())
				ON CONFLICT (consumer, event_id) DO NOTHING`,
			sequence: `INSERT INTO ` + q.Sequences + ` AS s (consumer, aggregate_type, aggregate_id, last_seq, prev_seq, updated_at)
				VALUES ($1, $2, $3, $4, 0, now())
				ON CONFLICT (consumer, aggregate_type, aggregate_id) DO UPDATE
				SET prev_seq = s.last_seq, last_seq = GREATEST(s.last_seq, EXCLUDED.last_seq), updated_at = now()
				RETURNING prev_seq`,
			cleanIDs: `DELETE FROM ` + q.Inbox + ` WHERE (consumer, event_id) IN (
				SELECT consumer, event_id FROM ` + q.Inbox + `
				WHERE recorded_at < now() - $1::bigint * interval '1 microsecond'
				ORDER BY recorded_at LIMIT $2 FOR UPDATE SKIP LOCKED)`,
			cleanSequences: `DELETE FROM ` + q.Sequences + ` WHERE (consumer, aggregate_type, aggregate_id) IN (
				SELECT consumer, aggregate_type, aggregate_id FROM ` + q.Sequences + `
				WHERE updated_at < now() - $1::bigint * interval '1 microsecond'
				ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED)`,
		}
		key = " WHERE consumer = $1 AND event_id = $2"
		out.saveResponse = `UPDATE ` + q.Inbox + ` SET response_status = $3, response_content_type = $4, response_body = $5` + key
	case MySQL:
		// INSERT IGNORE is safe here: every value is checked in Go first,
		// so the only thing it can ignore is the duplicate key.
		out = queries{
			record: `INSERT IGNORE INTO ` + q.Inbox + ` (consumer, event_id, recorded_at) VALUES (?, ?, UTC_TIMESTAMP(6))`,
			// MySQL applies the assignments left to right: prev_seq takes
			// last_seq before last_seq changes.
			sequence: `INSERT INTO ` + q.Sequences + ` (consumer, aggregate_type, aggregate_id, last_seq, prev_seq, updated_at)
				VALUES (?, ?, ?, ?, 0, UTC_TIMESTAMP(6))
				ON DUPLICATE KEY UPDATE prev_seq = last_seq, last_seq = GREATEST(last_seq, ?), updated_at = UTC_TIMESTAMP(6)`,
			sequenceRead:   `SELECT prev_seq FROM ` + q.Sequences + seqKey,
			cleanIDs:       `DELETE FROM ` + q.Inbox + ` WHERE recorded_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND ORDER BY recorded_at LIMIT ?`,
			cleanSequences: `DELETE FROM ` + q.Sequences + ` WHERE updated_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND ORDER BY updated_at LIMIT ?`,
			saveResponse:   `UPDATE ` + q.Inbox + ` SET response_status = ?, response_content_type = ?, response_body = ?` + key,
		}
	case SQLite:
		const now = `CAST(unixepoch('subsec') * 1000 AS INTEGER)`
		out = queries{
			record: `INSERT INTO ` + q.Inbox + ` (consumer, event_id, recorded_at) VALUES (?, ?, ` + now + `)
				ON CONFLICT (consumer, event_id) DO NOTHING`,
			sequence: `INSERT INTO ` + q.Sequences + ` (consumer, aggregate_type, aggregate_id, last_seq, prev_seq, updated_at)
				VALUES (?, ?, ?, ?, 0, ` + now + `)
				ON CONFLICT (consumer, aggregate_type, aggregate_id) DO UPDATE
				SET prev_seq = last_seq, last_seq = max(last_seq, excluded.last_seq), updated_at = ` + now + `
				RETURNING prev_seq`,
			cleanIDs: `DELETE FROM ` + q.Inbox + ` WHERE rowid IN (
				SELECT rowid FROM ` + q.Inbox + ` WHERE recorded_at < ` + now + ` - ?1 / 1000 ORDER BY recorded_at LIMIT ?2)`,
			cleanSequences: `DELETE FROM ` + q.Sequences + ` WHERE rowid IN (
				SELECT rowid FROM ` + q.Sequences + ` WHERE updated_at < ` + now + ` - ?1 / 1000 ORDER BY updated_at LIMIT ?2)`,
			saveResponse: `UPDATE ` + q.Inbox + ` SET response_status = ?, response_content_type = ?, response_body = ?` + key,
		}
	}
	out.loadResponse = `SELECT response_status, response_content_type, response_body FROM ` + q.Inbox + key
	out.count = `SELECT count(*) FROM ` + q.Inbox
	return out
}

// saveResponseArgs orders the arguments of queries.saveResponse.
func (d Dialect) saveResponseArgs(consumer, eventID string, status int, contentType string, body []byte) []any {
	if d == PostgreSQL {
		return []any{consumer, eventID, status, contentType, body}
	}
	return []any{status, contentType, body, consumer, eventID}
}

// migrationsDir is the directory of d's migrations under migrations/.
func (d Dialect) migrationsDir() string {
	switch d {
	case MySQL:
		return "mysql"
	case SQLite:
		return "sqlite"
	}
	return "postgres"
}

func (d Dialect) gooseDialect() database.Dialect {
	switch d {
	case MySQL:
		return database.DialectMySQL
	case SQLite:
		return database.DialectSQLite3
	}
	return database.DialectPostgres
}

// isMissingTable reports whether err says that a table does not exist.
func (d Dialect) isMissingTable(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	switch d {
	case PostgreSQL:
		var coded interface{ SQLState() string }
		if errors.As(err, &coded) {
			return coded.SQLState() == "42P01"
		}
		return strings.Contains(msg, "42P01")
	case MySQL:
		return strings.Contains(msg, "Error 1146") || strings.Contains(msg, "42S02")
	case SQLite:
		return strings.Contains(msg, "no such table")
	}
	return false
}
