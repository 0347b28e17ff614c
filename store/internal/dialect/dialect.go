// Package dialect is the one description of a SQL database that the SQL
// shared by the backends needs (store/internal/lanes, routesql,
// snapshotsql, sqladmin): its placeholders, identifier quote, clock
// expressions, insert-unless-exists and upsert clauses, locking clauses and
// how it encodes times and event ids. Each backend defines its one Dialect
// value once (store/postgres, store/mysql and store/sqlite, queries.go).
// Every field holds a fixed fragment, never caller text; statements are
// not fields: they are named statements of the backends' and the shared
// packages' sql/<step>.sql files.
package dialect

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
)

// Dialect is a database's SQL dialect.
type Dialect struct {
	// Dollar numbers placeholders $1, $2 (PostgreSQL) instead of ?.
	Dollar bool
	// Quote quotes identifiers: `"` or "`".
	Quote string

	// ClockMS is the database clock in Unix milliseconds, whatever the
	// session's time zone: an expression.
	ClockMS string
	// Now is the database clock in the stored form of a time: an
	// expression.
	Now string
	// Ago renders the database clock minus the microseconds of the
	// placeholder mark, in the stored form.
	Ago func(mark string) string
	// Minute renders the stored time col truncated to the minute, in the
	// stored form.
	Minute func(col string) string
	// Text renders the UUID column col as text.
	Text func(col string) string
	// Integer is the type a CAST makes an integer of ("" for BIGINT; MySQL
	// casts to SIGNED).
	Integer string

	// InsertIgnore heads an insert of a row unless its key exists, and
	// Conflict ends it ("ON CONFLICT DO NOTHING", or "").
	InsertIgnore, Conflict string
	// UpsertOn heads the clause that turns an insert into an update of the
	// row whose key exists, %s the key's column ("ON CONFLICT (%s) DO
	// UPDATE SET", or "ON DUPLICATE KEY UPDATE"); Excluded is the inserted
	// value of column %s in it ("excluded.%s", or "VALUES(%s)").
	UpsertOn, Excluded string
	// Lock locks the selected rows and SkipLocked skips those another
	// transaction holds ("" on SQLite, whose write transaction already
	// excludes every other writer).
	Lock, SkipLocked string

	// TimeArg turns a time into an argument compared with a stored time.
	TimeArg func(t time.Time) any
	// ScanClock returns a scan target for the database clock, and reads it
	// after the scan.
	ScanClock func() (dest any, read func() time.Time)
	// ScanAge returns a scan target for an age (NULL is 0), and reads it
	// after the scan.
	ScanAge func() (dest any, read func() time.Duration)
	// ScanEventID returns a scan target for an event id into id, and a
	// function to call after the scan (nil when there is nothing to do).
	ScanEventID func(id *outbox.EventID) (dest any, done func())
}

// P renders the n-th placeholder, from 1: $n on PostgreSQL, ? elsewhere.
func (d Dialect) P(n int) string {
	if d.Dollar {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// Upsert renders the head of the update clause of an insert whose key
// column key exists.
func (d Dialect) Upsert(key string) string {
	if !strings.Contains(d.UpsertOn, "%s") {
		return d.UpsertOn
	}
	return fmt.Sprintf(d.UpsertOn, key)
}

// Inserted renders the inserted value of column col in an upsert.
func (d Dialect) Inserted(col string) string { return fmt.Sprintf(d.Excluded, col) }

// Q renders name between the identifier quotes.
func (d Dialect) Q(name string) string { return d.Quote + name + d.Quote }
