package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/outbox/internal/migrate"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/adoptsql"
)

// adoptColumn is the definition adoption gives a missing column. event_id
// is added nullable, backfilled, then made NOT NULL and unique, with
// gen_random_uuid() as its default so that the team's existing INSERTs
// keep working; aggregate_type keeps the adopted type as its default.
// adoptSQL renders the adoption's fixed statement adopt.<name> of
// sql/adopt.sql for the tables t.
func adoptSQL(t store.Tables, name string) string {
	return statements.MustRenderNamed("adopt."+name, adoptsql.NamesFor(t))
}

func adoptColumn(name, aggregateType string) string {
	switch name {
	case "event_id", "lock_token":
		return "UUID"
	case "aggregate_type":
		return "VARCHAR(100) NOT NULL DEFAULT '" + aggregateType + "'"
	case "headers":
		return "JSON NOT NULL DEFAULT '{}'"
	case "retry_count":
		return "INT NOT NULL DEFAULT 0"
	case "available_at":
		return "TIMESTAMPTZ NOT NULL DEFAULT now()"
	case "processed_at", "expires_at", "locked_until":
		return "TIMESTAMPTZ"
	}
	return "TEXT" // last_error
}

func quote(name string) string { return `"` + name + `"` }

// adoption is the plan that brings a table to migration 00001's shape in
// place: inTx runs in one transaction (columns, backfill, sibling tables,
// the state mapping and the record of what was added); online runs after
// it, one statement at a time, because CREATE INDEX CONCURRENTLY cannot
// run in a transaction.
type adoption struct {
	inTx, online []string
	rows         int64
	processing   int64
	failed       int64
	finished     int64
}

// Adopt brings the team's existing table to the outbox's shape in place,
// keeping every row and its state (PROCESSING becomes PENDING, audited),
// records version 1 as applied and applies the later migrations.
func (s *Store) Adopt(ctx context.Context, o store.AdoptOptions) (store.AdoptResult, error) {
	var res store.AdoptResult
	if err := adoptsql.ValidateOptions(o); err != nil {
		return res, err
	}
	sc, err := s.InspectSchema(ctx)
	if err != nil {
		return res, err
	}
	r, done, err := s.migrator()
	if err != nil {
		return res, err
	}
	defer done()
	if res.AlreadyAdopted, err = adoptsql.CheckAdoptable(sc); err != nil {
		return res, err
	}
	var plan adoption
	if !res.AlreadyAdopted {
		if plan, err = s.planAdoption(ctx, r, sc, o.AggregateType); err != nil {
			return res, err
		}
	}
	later, err := r.PlanUp(ctx)
	if err != nil {
		return res, err
	}
	res.SQL = plan.sql()
	if len(plan.inTx) == 0 && len(plan.online) == 0 {
		res.SQL = nil
	}
	res.SQL = append(res.SQL, adoptsql.AfterAdoptionSQL(s.t.Migrations, later)...)
	res.Rows, res.Requeued = plan.rows, plan.processing
	res.DeadLettered, res.Finished = plan.failed, plan.finished
	if o.DryRun {
		return res, nil
	}
	if len(plan.inTx) > 0 {
		if err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			for _, q := range plan.inTx {
				if _, err := tx.Exec(ctx, q); err != nil {
					return fmt.Errorf("adopt %s: %s: %w (nothing was changed)", s.t.Outbox, adoptsql.FirstLine(q), err)
				}
			}
			return nil
		}); err != nil {
			return res, err
		}
	}
	for _, q := range plan.online {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			return res, fmt.Errorf("adopt %s: %s: %w (the columns and rows are in place; run outbox migrate --adopt again to finish)", s.t.Outbox, adoptsql.FirstLine(q), err)
		}
	}
	if res.Applied, err = adoptsql.FinishAdoption(ctx, r); err != nil {
		return res, err
	}
	return res, nil
}

// onlineIndex begins each of the outbox table's indexes in migration 00001
// rendered for adoption (its Online field set).
const onlineIndex = "CREATE INDEX CONCURRENTLY IF NOT EXISTS "

// planAdoption reads the table and returns the statements that adopt it.
// Only what is missing is added, so that a second run after an
// interruption finishes the first.
func (s *Store) planAdoption(ctx context.Context, r *migrate.Runner, sc store.Schema, aggregateType string) (adoption, error) {
	var a adoption
	t := quote(s.t.Outbox)
	for _, c := range adoptsql.RequiredColumns {
		if slices.Contains(sc.Missing, c) {
			return a, fmt.Errorf("%w: cannot adopt table %s: it lacks the columns %s, which no default can fill (it needs at least %s); nothing was changed",
				store.ErrForeignTable, s.t.Outbox, strings.Join(sc.Missing, ", "), strings.Join(adoptsql.RequiredColumns, ", "))
		}
	}
	if !sc.Adopted {
		for _, sib := range []string{s.t.DeadLetters, s.t.Attempts} {
			exists, _, err := s.relation(ctx, sib)
			if err != nil {
				return a, err
			}
			if exists {
				return a, fmt.Errorf("%w: cannot adopt table %s: table %s already exists and outbox did not create it; rename or drop it first, nothing was changed",
					store.ErrForeignTable, s.t.Outbox, sib)
			}
		}
	}
	counts, nulls, err := s.statusCounts(ctx)
	if err != nil {
		return a, err
	}
	if err := adoptsql.CheckStatuses(s.t.Outbox, counts, nulls); err != nil {
		return a, err
	}
	for _, n := range counts {
		a.rows += n
	}
	a.processing = counts["PROCESSING"]
	a.failed = counts["FAILED"]
	a.finished = counts["PROCESSED"] + counts["EXPIRED"] + counts["SKIPPED"]

	indexes, err := s.indexes(ctx)
	if err != nil {
		return a, err
	}
	constraints, err := s.constraints(ctx)
	if err != nil {
		return a, err
	}
	first, err := r.UpSQLWith(1, s.migrationNames(true))
	if err != nil {
		return a, err
	}
	var siblings, outboxIndexes []string
	var record []string
	for _, st := range migrate.Statements(first) {
		switch {
		case strings.HasPrefix(st, "CREATE TABLE IF NOT EXISTS "+quote(s.t.DeadLetters)),
			strings.HasPrefix(st, "CREATE TABLE IF NOT EXISTS "+quote(s.t.Attempts)),
			strings.Contains(st, " ON "+quote(s.t.DeadLetters)), strings.Contains(st, " ON "+quote(s.t.Attempts)):
			siblings = append(siblings, st)
		case strings.HasPrefix(st, onlineIndex) && strings.Contains(st, " ON "+t+" "):
			outboxIndexes = append(outboxIndexes, st)
		}
	}
	a.inTx = append(a.inTx, adoptSQL(s.t, "lock_timeout"),
		adoptSQL(s.t, "record_table"))
	var adds []string
	for _, c := range sc.Missing {
		adds = append(adds, "ADD COLUMN "+quote(c)+" "+adoptColumn(c, aggregateType))
		record = append(record, "('column', '"+c+"')")
	}
	if len(adds) > 0 {
		a.inTx = append(a.inTx, "ALTER TABLE "+t+"\n    "+strings.Join(adds, ",\n    "))
	}
	a.inTx = append(a.inTx,
		adoptSQL(s.t, "backfill_event_id"),
		adoptSQL(s.t, "event_id_not_null"),
		// The team's existing INSERTs name no event_id.
		adoptSQL(s.t, "event_id_default"),
		adoptSQL(s.t, "backfill_retry_count"))
	if !sc.Adopted {
		a.inTx = append(a.inTx, siblings...)
		record = append(record, "('table', '"+s.t.DeadLetters+"')", "('table', '"+s.t.Attempts+"')")
	}
	a.inTx = append(a.inTx,
		adoptSQL(s.t, "audit_processing"),
		adoptSQL(s.t, "release_processing"))
	statusCheck, eventIDKey := s.t.Outbox+"_status_check", s.t.Outbox+"_event_id_key"
	if validated, ok := constraints[statusCheck]; !ok {
		a.inTx = append(a.inTx, "ALTER TABLE "+t+" ADD CONSTRAINT "+quote(statusCheck)+" CHECK (status IN\n"+
			"    ('PENDING', 'PROCESSING', 'PROCESSED', 'FAILED', 'EXPIRED', 'BLOCKED', 'SKIPPED')) NOT VALID")
		a.online = append(a.online, "ALTER TABLE "+t+" VALIDATE CONSTRAINT "+quote(statusCheck))
		record = append(record, "('constraint', '"+statusCheck+"')")
	} else if !validated {
		a.online = append(a.online, "ALTER TABLE "+t+" VALIDATE CONSTRAINT "+quote(statusCheck))
	}
	// Indexes are built online; an index left invalid by an interrupted
	// build is dropped and built again.
	build := func(name, create string) {
		if valid, ok := indexes[name]; ok && valid {
			return
		} else if ok {
			a.online = append(a.online, "DROP INDEX CONCURRENTLY IF EXISTS "+quote(name))
		}
		a.online = append(a.online, create)
		record = append(record, "('index', '"+name+"')")
	}
	if _, ok := constraints[eventIDKey]; !ok {
		build(eventIDKey, "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS "+quote(eventIDKey)+" ON "+t+" (event_id)")
		a.online = append(a.online, "ALTER TABLE "+t+" ADD CONSTRAINT "+quote(eventIDKey)+" UNIQUE USING INDEX "+quote(eventIDKey))
		record = append(record, "('constraint', '"+eventIDKey+"')")
	}
	for _, st := range outboxIndexes {
		name := strings.Trim(strings.Fields(strings.TrimPrefix(st, onlineIndex))[0], `"`)
		build(name, st)
	}
	// The record is written first in the transaction's order of effects
	// (it commits with the columns), and lists indexes before they exist,
	// so that --down also removes an index an interrupted run left behind.
	if len(record) > 0 {
		a.inTx = slices.Insert(a.inTx, 2, adoptSQL(s.t, "record_insert")+"\n    "+
			strings.Join(record, ",\n    ")+"\nON CONFLICT DO NOTHING")
	}
	return a, nil
}

func (s *Store) statusCounts(ctx context.Context) (map[string]int64, int64, error) {
	rows, err := s.pool.Query(ctx, adoptSQL(s.t, "count_by_status"))
	if err != nil {
		return nil, 0, fmt.Errorf("count the rows of %s by status: %w", s.t.Outbox, err)
	}
	defer rows.Close()
	counts := map[string]int64{}
	var nulls int64
	for rows.Next() {
		var st *string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, 0, fmt.Errorf("count the rows of %s by status: %w", s.t.Outbox, err)
		}
		if st == nil {
			nulls = n
		} else {
			counts[*st] = n
		}
	}
	return counts, nulls, rows.Err()
}

// indexes returns the table's indexes and whether each is valid.
func (s *Store) indexes(ctx context.Context) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, migrateSQL("adopt.indexes"), quote(s.t.Outbox))
	if err != nil {
		return nil, fmt.Errorf("read the indexes of %s: %w", s.t.Outbox, err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var name string
		var valid bool
		if err := rows.Scan(&name, &valid); err != nil {
			return nil, err
		}
		out[name] = valid
	}
	return out, rows.Err()
}

// constraints returns the table's constraints and whether each is validated.
func (s *Store) constraints(ctx context.Context) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, migrateSQL("adopt.constraints"), quote(s.t.Outbox))
	if err != nil {
		return nil, fmt.Errorf("read the constraints of %s: %w", s.t.Outbox, err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var name string
		var validated bool
		if err := rows.Scan(&name, &validated); err != nil {
			return nil, fmt.Errorf("read the constraints of %s: %w", s.t.Outbox, err)
		}
		out[name] = validated
	}
	return out, rows.Err()
}

func (a adoption) sql() []string {
	out := []string{"BEGIN"}
	out = append(out, a.inTx...)
	out = append(out, "COMMIT")
	return append(out, a.online...)
}
