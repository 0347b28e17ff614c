package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/txoutbox/outbox"
)

// DSNForms lists the accepted DSN forms, for error messages.
const DSNForms = "use mysql://user:pass@host:3306/db?param=value or the driver's form user:pass@tcp(host:3306)/db?param=value"

// LooksLikeDSN reports whether dsn is in one of the forms [ParseConfig]
// accepts: a mysql:// (or mariadb://) URL, or go-sql-driver/mysql's own
// user:pass@tcp(host:port)/db form. It does not validate the rest.
func LooksLikeDSN(dsn string) bool {
	lower := strings.ToLower(strings.TrimSpace(dsn))
	if strings.HasPrefix(lower, "mysql://") || strings.HasPrefix(lower, "mariadb://") {
		return true
	}
	if strings.Contains(lower, "://") {
		return false
	}
	for _, p := range []string{"@tcp(", "@tcp6(", "@unix(", "@/"} {
		if strings.Contains(lower, p) {
			return true
		}
	}
	return strings.HasPrefix(lower, "tcp(") || strings.HasPrefix(lower, "unix(")
}

// ParseConfig parses dsn, a mysql://user:pass@host:port/db?params URL
// (mariadb:// is accepted too) or go-sql-driver/mysql's own DSN
// (user:pass@tcp(host:port)/db?params), and returns the driver
// configuration with the settings the store relies on forced:
//
//   - parseTime=true and loc=UTC: DATETIME columns are read as UTC times;
//   - time_zone='+00:00': the session time zone is UTC, so NOW() and
//     CURRENT_TIMESTAMP agree with the UTC_TIMESTAMP() the store uses;
//   - interpolateParams=true: a statement with arguments is one round trip
//     instead of three (prepare, execute, close);
//   - multiStatements=false: one statement per call, always;
//   - charset utf8mb4 (the collation given, if it is a utf8mb4 one): events
//     may carry any Unicode text.
//
// Other parameters (TLS, timeouts, session variables) are kept. Errors
// never contain the password.
func ParseConfig(dsn string) (*mysqldrv.Config, error) {
	cfg, err := parseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = true
	cfg.MultiStatements = false
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	collation := cfg.Collation
	if !strings.HasPrefix(strings.ToLower(collation), "utf8mb4_") {
		collation = "utf8mb4_general_ci"
	}
	if err := cfg.Apply(mysqldrv.Charset("utf8mb4", collation)); err != nil {
		return nil, fmt.Errorf("%w: MySQL DSN: %v", outbox.ErrInvalidConfig, err)
	}
	return cfg, nil
}

// ConfigureDSN returns dsn (either form) rewritten as a go-sql-driver/mysql
// DSN with the settings of [ParseConfig], for applications that open their
// *sql.DB with sql.Open("mysql", ...). It does not set the isolation level,
// whose session variable has different names on MySQL 8
// (transaction_isolation) and MariaDB before 11.1 (tx_isolation): use
// [NewConnector] to get READ COMMITTED on both, or add the variable
// yourself. The result contains the password: do not log it.
func ConfigureDSN(dsn string) (string, error) {
	cfg, err := ParseConfig(dsn)
	if err != nil {
		return "", err
	}
	return cfg.FormatDSN(), nil
}

// NewConnector returns a connector for sql.OpenDB with the settings of
// [ParseConfig], whose connections also run at READ COMMITTED (SET SESSION
// TRANSACTION ISOLATION LEVEL READ COMMITTED, which MySQL 8 and every
// MariaDB accept). It is how [Open] connects, and how an application should
// open the *sql.DB it enqueues with:
//
//	connector, err := mysql.NewConnector("mysql://app:secret@db:3306/payments")
//	db := sql.OpenDB(connector)
func NewConnector(dsn string) (driver.Connector, error) {
	cfg, err := ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	return newReadCommittedConnector(cfg)
}

func newReadCommittedConnector(cfg *mysqldrv.Config) (driver.Connector, error) {
	c, err := mysqldrv.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: MySQL DSN: %s", outbox.ErrInvalidConfig, redact(err.Error(), cfg.Passwd))
	}
	return &rcConnector{base: c}, nil
}

// rcConnector sets READ COMMITTED on every new connection, and has
// database/sql close a connection that failed with sessionUnusable
// (failoverConn) instead of pooling it.
type rcConnector struct{ base driver.Connector }

// isolationSQL is dsn.isolation of sql/dsn.sql.
var isolationSQL = statements.MustRenderNamed("dsn.isolation", nil)

func (c *rcConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := conn.(driver.ExecerContext)
	if !ok {
		conn.Close()
		return nil, errors.New("mysql driver connection cannot execute statements")
	}
	if _, err := ex.ExecContext(ctx, isolationSQL, nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("set READ COMMITTED: %w", err)
	}
	return &failoverConn{base: conn}, nil
}

func (c *rcConnector) Driver() driver.Driver { return rcDriver{} }

// rcDriver is the driver.Driver of connectors made by NewConnector. The
// store recognizes it (db.Driver()) to know that every connection of a
// *sql.DB already runs at READ COMMITTED.
type rcDriver struct{}

// Open opens one connection for a DSN in either form, at READ COMMITTED.
func (rcDriver) Open(dsn string) (driver.Conn, error) {
	c, err := NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return c.Connect(context.Background())
}

// readCommittedDB reports whether every connection of db runs at READ
// COMMITTED because it was opened with NewConnector.
func readCommittedDB(db *sql.DB) bool {
	_, ok := db.Driver().(rcDriver)
	return ok
}

func parseConfig(dsn string) (*mysqldrv.Config, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: cannot use this DSN for MySQL (%s): %s", outbox.ErrInvalidConfig, why, DSNForms)
	}
	dsn = strings.TrimSpace(dsn)
	if dsn == "" {
		return nil, bad("it is empty")
	}
	lower := strings.ToLower(dsn)
	if i := strings.Index(lower, "://"); i >= 0 {
		switch lower[:i] {
		case "mysql", "mariadb":
			return parseURL(dsn)
		default:
			return nil, bad(fmt.Sprintf("scheme %q is not mysql", dsn[:i]))
		}
	}
	cfg, err := mysqldrv.ParseDSN(dsn)
	if err != nil {
		return nil, bad(redact(err.Error(), driverPassword(dsn)))
	}
	return cfg, nil
}

// parseURL converts mysql://user:pass@host:port/db?params to the driver's
// configuration. The query parameters are the driver's (tls, timeout,
// readTimeout, collation, ...) or session variables, as in its own DSN.
func parseURL(dsn string) (*mysqldrv.Config, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: cannot parse the MySQL URL (%s): %s", outbox.ErrInvalidConfig, why, DSNForms)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		// url.Error repeats the whole URL, password included: keep only
		// the reason, and scrub the password from that too.
		var ue *url.Error
		msg := err.Error()
		if errors.As(err, &ue) {
			msg = ue.Err.Error()
		}
		return nil, bad(redact(msg, urlPassword(dsn)))
	}
	if u.Opaque != "" {
		return nil, bad("write mysql://host/db, with two slashes")
	}
	if u.Fragment != "" {
		return nil, bad("a '#' must be escaped as %23")
	}
	host := u.Host
	if host == "" {
		host = "127.0.0.1:3306"
	} else if _, _, err := net.SplitHostPort(host); err != nil {
		h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		host = net.JoinHostPort(h, "3306")
	}
	db := strings.TrimPrefix(u.Path, "/")
	if strings.Contains(db, "/") {
		return nil, bad("the path must be one database name")
	}
	// Let the driver parse the address, database and parameters (it knows
	// their names and types), then set the credentials directly, so that no
	// character of theirs needs escaping.
	rest := "tcp(" + host + ")/" + url.PathEscape(db)
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return nil, bad("the query string is not valid: escape its values")
		}
		rest += "?" + q.Encode()
	}
	password, _ := u.User.Password()
	cfg, err := mysqldrv.ParseDSN(rest)
	if err != nil {
		return nil, bad(redact(err.Error(), password))
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd = password
	}
	return cfg, nil
}

// urlPassword extracts the password of a URL DSN even when it does not
// parse: what lies between "user:" and the last '@' of the authority.
func urlPassword(dsn string) string {
	i := strings.Index(dsn, "://")
	if i < 0 {
		return ""
	}
	rest := dsn[i+3:]
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return ""
	}
	cred := rest[:at]
	if j := strings.IndexByte(cred, ':'); j >= 0 {
		return cred[j+1:]
	}
	return ""
}

// driverPassword extracts the password of a driver-form DSN
// (user:pass@tcp(...)/db) even when it does not parse.
func driverPassword(dsn string) string {
	slash := strings.LastIndex(dsn, "/")
	head := dsn
	if slash >= 0 {
		head = dsn[:slash]
	}
	at := strings.LastIndex(head, "@")
	if at < 0 {
		return ""
	}
	cred := head[:at]
	if j := strings.IndexByte(cred, ':'); j >= 0 {
		return cred[j+1:]
	}
	return ""
}

// redact removes secret (and its URL-escaped forms) from msg.
func redact(msg, secret string) string {
	if secret == "" {
		return msg
	}
	for _, s := range []string{secret, url.QueryEscape(secret), url.PathEscape(secret)} {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	return msg
}

// address returns host:port (or the socket path) that cfg connects to, for
// messages.
func address(cfg *mysqldrv.Config) string {
	if cfg.Addr == "" {
		return cfg.Net
	}
	return cfg.Addr
}
