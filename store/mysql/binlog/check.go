package binlog

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/txoutbox/outbox"
)

// CheckServer reports whether the server db is connected to can be read
// by a [Reader] as the connection's user: binary log on, binlog_format
// ROW, binlog_row_image FULL or NOBLOB, a nonzero server_id, and the
// REPLICATION SLAVE and REPLICATION CLIENT privileges (BINLOG MONITOR on
// MariaDB 10.5+). It reads the global values, which new sessions and
// replicas see. The error, which wraps outbox.ErrInvalidConfig, names
// every requirement that is not met, each with what fixes it; a failure
// to query the server is returned as it is.
func CheckServer(ctx context.Context, db *sql.DB) error {
	var (
		logBin           sql.NullString
		format, rowImage sql.NullString
		serverID         sql.NullInt64
	)
	err := db.QueryRowContext(ctx,
		"SELECT @@GLOBAL.log_bin, @@GLOBAL.binlog_format, @@GLOBAL.binlog_row_image, @@GLOBAL.server_id").
		Scan(&logBin, &format, &rowImage, &serverID)
	if err != nil {
		return fmt.Errorf("binlog: read the server's binary log settings: %w", err)
	}
	grants, err := currentGrants(ctx, db)
	if err != nil {
		return fmt.Errorf("binlog: read the current user's privileges: %w", err)
	}
	var problems []string
	if !isOn(logBin.String) {
		problems = append(problems, "the binary log is off: start the server with --log-bin (log_bin=mysql-bin in its configuration) and restart it")
	}
	if f := strings.ToUpper(format.String); f != "ROW" {
		problems = append(problems, fmt.Sprintf("binlog_format is %s: set binlog_format=ROW in the server's configuration (SET GLOBAL binlog_format=ROW takes effect for new sessions)", orUnset(f)))
	}
	if img := strings.ToUpper(rowImage.String); img != "FULL" && img != "NOBLOB" {
		problems = append(problems, fmt.Sprintf("binlog_row_image is %s: set binlog_row_image=FULL in the server's configuration (SET GLOBAL binlog_row_image=FULL takes effect for new sessions)", orUnset(img)))
	}
	if !serverID.Valid || serverID.Int64 == 0 {
		problems = append(problems, "server_id is 0, and a server with server_id 0 refuses replicas: set server_id to a nonzero value (SET GLOBAL server_id=1, and server_id=1 in the server's configuration)")
	}
	problems = append(problems, grants.missing()...)
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: the server cannot be read as a binary log replica: %s",
		outbox.ErrInvalidConfig, strings.Join(problems, "; "))
}

func isOn(v string) bool {
	switch strings.ToUpper(v) {
	case "1", "ON":
		return true
	}
	return false
}

func orUnset(v string) string {
	if v == "" {
		return "not set"
	}
	return v
}

// privileges are the global privileges a user holds, from SHOW GRANTS.
type privileges struct {
	user string
	all  bool
	set  map[string]bool
}

// currentGrants reads the global privileges of the connection's user.
// Privileges held through a MySQL 8 role are not seen: grant them to the
// user itself.
func currentGrants(ctx context.Context, db *sql.DB) (privileges, error) {
	p := privileges{set: map[string]bool{}}
	if err := db.QueryRowContext(ctx, "SELECT CURRENT_USER()").Scan(&p.user); err != nil {
		return p, err
	}
	rows, err := db.QueryContext(ctx, "SHOW GRANTS FOR CURRENT_USER()")
	if err != nil {
		return p, err
	}
	defer rows.Close()
	for rows.Next() {
		var grant string
		if err := rows.Scan(&grant); err != nil {
			return p, err
		}
		p.add(grant)
	}
	return p, rows.Err()
}

// add records the privileges of one GRANT ... ON *.* TO ... line; grants
// on a database or table do not include the replication privileges.
func (p *privileges) add(grant string) {
	upper := strings.ToUpper(grant)
	if !strings.HasPrefix(upper, "GRANT ") {
		return
	}
	on := strings.Index(upper, " ON *.* TO ")
	if on < 0 {
		return
	}
	for _, priv := range strings.Split(upper[len("GRANT "):on], ",") {
		priv = strings.TrimSpace(priv)
		if priv == "ALL PRIVILEGES" || priv == "ALL" {
			p.all = true
		}
		p.set[priv] = true
	}
}

func (p privileges) has(names ...string) bool {
	if p.all {
		return true
	}
	for _, n := range names {
		if p.set[n] {
			return true
		}
	}
	return false
}

// missing names the replication privileges the user lacks, each with
// the GRANT that gives it. MariaDB 10.5+ shows REPLICATION CLIENT as
// BINLOG MONITOR; MySQL 8 and older MariaDB as REPLICATION CLIENT.
func (p privileges) missing() []string {
	who := quoteUser(p.user)
	var out []string
	if !p.has("REPLICATION SLAVE", "REPLICATION REPLICA") {
		out = append(out, fmt.Sprintf("the user %s lacks REPLICATION SLAVE: GRANT REPLICATION SLAVE ON *.* TO %s", who, who))
	}
	if !p.has("REPLICATION CLIENT", "BINLOG MONITOR") {
		out = append(out, fmt.Sprintf("the user %s lacks REPLICATION CLIENT (BINLOG MONITOR on MariaDB 10.5+): GRANT REPLICATION CLIENT ON *.* TO %s", who, who))
	}
	return out
}

// quoteUser renders CURRENT_USER()'s user@host as 'user'@'host'.
func quoteUser(u string) string {
	i := strings.LastIndexByte(u, '@')
	if i < 0 {
		return "'" + u + "'"
	}
	return "'" + u[:i] + "'@'" + u[i+1:] + "'"
}
