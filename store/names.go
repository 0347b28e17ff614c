package store

import (
	"fmt"
	"regexp"

	"github.com/txoutbox/outbox"
)

// DefaultTable is the outbox table name used when none is configured.
const DefaultTable = "outbox_events"

// MaxTableLen leaves room for the suffixes of the companion tables
// (_dead_letters, _attempts, _schema_migrations) within 63 characters.
const MaxTableLen = 40

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// ValidateTable checks a configured table name. Names are never pasted from
// input: only lower-case letters, digits and underscores are allowed, so
// that a name like "x; drop table y" is refused before it reaches SQL.
func ValidateTable(name string) error {
	if name == "" {
		return fmt.Errorf("%w: table name is empty", outbox.ErrInvalidConfig)
	}
	if len(name) > MaxTableLen || !identRE.MatchString(name) {
		return fmt.Errorf("%w: table name %q is not allowed: use 1 to %d characters from a-z, 0-9 and _, starting with a letter or _ (for example payment_outbox)",
			outbox.ErrInvalidConfig, name, MaxTableLen)
	}
	return nil
}

// Tables are the names of an outbox's tables.
type Tables struct {
	Outbox      string // e.g. outbox_events
	DeadLetters string // outbox_events_dead_letters
	Attempts    string // outbox_events_attempts
	Migrations  string // outbox_events_schema_migrations
}

// TablesFor validates name (empty means DefaultTable) and derives the
// companion table names.
func TablesFor(name string) (Tables, error) {
	if name == "" {
		name = DefaultTable
	}
	if err := ValidateTable(name); err != nil {
		return Tables{}, err
	}
	return Tables{
		Outbox:      name,
		DeadLetters: name + "_dead_letters",
		Attempts:    name + "_attempts",
		Migrations:  name + "_schema_migrations",
	}, nil
}
