package sqlite

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/txoutbox/outbox"
)

// DSN returns the modernc.org/sqlite data source name the store uses for a
// database file at path, and that applications should use for their own
// *sql.DB on the same file:
//
//	file:<path>?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_txlock=immediate
//
// WAL lets readers (the relay's polling, the dashboard) run beside the
// single writer; busy_timeout makes a writer wait for the write lock instead
// of failing; _txlock=immediate makes every db.BeginTx take the write lock
// at BEGIN, so that a transaction that reads and then writes never fails
// half-way with SQLITE_BUSY. Open it with sql.Open("sqlite", sqlite.DSN(path)).
func DSN(path string) string {
	return "file:" + escapeURIPath(path) +
		"?_pragma=busy_timeout(" + fmt.Sprint(BusyTimeout.Milliseconds()) + ")" +
		"&_pragma=journal_mode(WAL)" +
		"&_pragma=foreign_keys(1)" +
		"&_pragma=synchronous(NORMAL)" +
		"&_txlock=immediate"
}

// escapeURIPath escapes the characters that would end or alter the path of
// a SQLite file: URI.
func escapeURIPath(p string) string {
	return strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
}

// dsnForms lists the accepted DSN forms, for error messages.
const dsnForms = "use sqlite:///absolute/path.db, sqlite://relative/path.db or a plain file path"

// ParsePath returns the database file path of dsn: sqlite:///absolute/path.db,
// sqlite://relative/path.db, or a plain file path.
func ParsePath(dsn string) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: cannot use this DSN for SQLite (%s): %s", outbox.ErrInvalidConfig, why, dsnForms)
	}
	dsn = strings.TrimSpace(dsn)
	if dsn == "" {
		return "", bad("it is empty")
	}
	lower := strings.ToLower(dsn)
	var path string
	switch {
	case strings.HasPrefix(lower, "sqlite://"):
		rest := dsn[len("sqlite://"):]
		if strings.ContainsAny(rest, "?#") {
			return "", bad("query parameters are not accepted: the store sets its own pragmas")
		}
		p, err := url.PathUnescape(rest)
		if err != nil {
			return "", bad("the path is not validly %-escaped")
		}
		path = p
	case strings.HasPrefix(lower, "sqlite:"):
		if strings.Contains(lower, ":memory:") {
			return "", bad("in-memory databases are not supported: each connection would see its own empty database")
		}
		return "", bad("a sqlite: DSN starts with sqlite://")
	case strings.HasPrefix(lower, "file:"):
		return "", bad("file: URIs are not accepted")
	case strings.Contains(dsn, "://"):
		scheme := dsn[:strings.Index(dsn, "://")]
		return "", bad("scheme " + fmt.Sprintf("%q", scheme) + " is not SQLite")
	default:
		path = dsn
	}
	if path == "" || path == "/" {
		return "", bad("it names no file")
	}
	if strings.Contains(path, ":memory:") {
		return "", bad("in-memory databases are not supported: each connection would see its own empty database")
	}
	if strings.HasSuffix(path, "/") {
		return "", bad("the path names a directory")
	}
	return path, nil
}
