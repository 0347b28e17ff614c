package cdc

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/outbox"
)

var nameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// validateName checks a slot or publication name: PostgreSQL allows only
// lower-case letters, digits and underscores in slot names, and the same
// rule keeps publication names out of quoting trouble.
func validateName(what, name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: %s name %q is not allowed: use 1 to 63 characters from a-z, 0-9 and _, starting with a letter or _",
			outbox.ErrInvalidConfig, what, name)
	}
	return nil
}

// ErrSetup marks a database that cannot serve logical replication as
// configured; the message says what to change.
var ErrSetup = errors.New("cdc")

func setupErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrSetup}, args...)...)
}

// Check verifies what the logical source needs from the database and the
// role: wal_level=logical, PostgreSQL 14 or later, the REPLICATION
// attribute (or superuser), and a primary key on the outbox table. Each
// failure is one line that says how to fix it.
func Check(ctx context.Context, pool *pgxpool.Pool, table string) error {
	var level string
	var version int
	if err := pool.QueryRow(ctx, `SELECT current_setting('wal_level'), current_setting('server_version_num')::int`).Scan(&level, &version); err != nil {
		return fmt.Errorf("cdc: read wal_level: %w", err)
	}
	if version < 140000 {
		return setupErr("PostgreSQL %d.%d is too old for --source logical: use PostgreSQL 14 or later", version/10000, version%10000/100)
	}
	if level != "logical" {
		return setupErr("wal_level is %q, not \"logical\": run ALTER SYSTEM SET wal_level = logical; and restart PostgreSQL (or use --source poll)", level)
	}
	var canReplicate bool
	var role string
	if err := pool.QueryRow(ctx, `SELECT rolreplication OR rolsuper, rolname FROM pg_roles WHERE rolname = current_user`).Scan(&canReplicate, &role); err != nil {
		return fmt.Errorf("cdc: read the role's attributes: %w", err)
	}
	if !canReplicate {
		return setupErr("role %q has no replication privilege: run ALTER ROLE %s WITH REPLICATION; (as a superuser)", role, pgx.Identifier{role}.Sanitize())
	}
	var hasPK bool
	err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index WHERE indrelid = to_regclass($1) AND indisprimary)`, quoteIdent(table)).Scan(&hasPK)
	if err != nil {
		return fmt.Errorf("cdc: look up the primary key of %s: %w", table, err)
	}
	if !hasPK {
		var exists bool
		_ = pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, quoteIdent(table)).Scan(&exists)
		if !exists {
			return setupErr("table %q does not exist: run `outbox migrate` first", table)
		}
		return setupErr("table %q has no primary key, which logical replication needs to identify its rows: run `outbox migrate` (the outbox's id is its primary key) or ALTER TABLE %s ADD PRIMARY KEY (id)", table, quoteIdent(table))
	}
	return nil
}

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

// ensurePublication creates the publication of the outbox table's inserts
// when it is missing.
func ensurePublication(ctx context.Context, pool *pgxpool.Pool, publication, table string) error {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, publication).Scan(&exists); err != nil {
		return fmt.Errorf("cdc: look up publication %s: %w", publication, err)
	}
	if exists {
		var publishes bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables
			WHERE pubname = $1 AND tablename = $2 AND schemaname = current_schema())`, publication, table).Scan(&publishes)
		if err != nil {
			return fmt.Errorf("cdc: look up the tables of publication %s: %w", publication, err)
		}
		if !publishes {
			return setupErr("publication %q exists and does not publish table %q: run ALTER PUBLICATION %s ADD TABLE %s; or choose another --publication",
				publication, table, quoteIdent(publication), quoteIdent(table))
		}
		return nil
	}
	_, err := pool.Exec(ctx, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')`, quoteIdent(publication), quoteIdent(table)))
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42710" { // created meanwhile by another relay
		return nil
	}
	if err != nil {
		return fmt.Errorf("cdc: create publication %s: %w", publication, err)
	}
	return nil
}

// ensureSlot creates the logical slot (pgoutput) when it is missing.
func ensureSlot(ctx context.Context, pool *pgxpool.Pool, slot string) error {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, slot).Scan(&exists); err != nil {
		return fmt.Errorf("cdc: look up slot %s: %w", slot, err)
	}
	if exists {
		return nil
	}
	_, err := pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42710" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cdc: create replication slot %s: %w", slot, err)
	}
	return nil
}

// Drop removes the slot and the publication if they exist (outbox migrate
// --down). A slot in use by a running relay is refused with advice.
func Drop(ctx context.Context, pool *pgxpool.Pool, slot, publication string) error {
	if err := validateName("slot", slot); err != nil {
		return err
	}
	if err := validateName("publication", publication); err != nil {
		return err
	}
	var active bool
	var pid *int32
	err := pool.QueryRow(ctx, `SELECT active, active_pid FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active, &pid)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("cdc: look up slot %s: %w", slot, err)
	case active:
		return setupErr("replication slot %q is in use by process %d: stop the relay that streams from it first", slot, derefPID(pid))
	default:
		if _, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot); err != nil {
			return fmt.Errorf("cdc: drop replication slot %s: %w", slot, err)
		}
	}
	if _, err := pool.Exec(ctx, `DROP PUBLICATION IF EXISTS `+quoteIdent(publication)); err != nil {
		return fmt.Errorf("cdc: drop publication %s: %w", publication, err)
	}
	return nil
}

func derefPID(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// SlotLag is what `outbox status` shows of a slot.
type SlotLag struct {
	Slot   string
	Exists bool
	Active bool
	// Bytes of WAL the slot holds back: the server's current WAL position
	// minus the slot's confirmed position.
	Bytes int64
}

// Lag reads the slot's lag. A missing slot is reported with Exists false.
func Lag(ctx context.Context, pool *pgxpool.Pool, slot string) (SlotLag, error) {
	l := SlotLag{Slot: slot}
	err := pool.QueryRow(ctx, `
SELECT active, COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint
FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&l.Active, &l.Bytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, nil
	}
	if err != nil {
		return l, fmt.Errorf("cdc: read the lag of slot %s: %w", slot, err)
	}
	l.Exists = true
	return l, nil
}

// slotBusy turns PostgreSQL's "replication slot is active" error into advice.
func slotBusy(slot string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "55006" {
		return setupErr("replication slot %q is held by another process (%s): only one relay streams from a slot; stop the other one, or give this relay its own --slot", slot, strings.TrimSpace(pe.Message))
	}
	return err
}
