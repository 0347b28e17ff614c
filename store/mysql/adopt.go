package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/txoutbox/outbox/internal/migrate"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/adoptsql"
)

// adoptSQL renders the adoption's fixed statement adopt.<name> of
// sql/adopt.sql for the tables t.
func adoptSQL(t store.Tables, name string) string {
	return statements.MustRenderNamed("adopt."+name, adoptsql.NamesFor(t))
}

func quote(name string) string { return "`" + name + "`" }

func (s *Store) indexes(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, stmt("adopt.indexes", s.t), s.t.Outbox)
	if err != nil {
		return nil, fmt.Errorf("read the indexes of %s: %w", s.t.Outbox, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

func (s *Store) statusCounts(ctx context.Context) (map[string]int64, int64, error) {
	rows, err := s.db.QueryContext(ctx, adoptSQL(s.t, "count_by_status"))
	if err != nil {
		return nil, 0, fmt.Errorf("count the rows of %s by status: %w", s.t.Outbox, err)
	}
	defer rows.Close()
	counts := map[string]int64{}
	var nulls int64
	for rows.Next() {
		var st sql.NullString
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, 0, fmt.Errorf("count the rows of %s by status: %w", s.t.Outbox, err)
		}
		if !st.Valid {
			nulls = n
		} else {
			counts[st.String] += n
		}
	}
	return counts, nulls, rows.Err()
}

// adoptColumn is the definition adoption gives a missing column. The
// generated columns are VIRTUAL (00001 has them STORED): adding a stored
// column rebuilds the table, a virtual one does not, and the indexes on
// them serve the same queries. event_id is added nullable, backfilled,
// then made NOT NULL and unique, with UUID() as its default so that the
// team's existing INSERTs keep working.
func adoptColumn(name, aggregateType string, f flavor) string {
	switch name {
	case "event_id", "lock_token":
		return "CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL"
	case "aggregate_type":
		return "VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '" + aggregateType + "'"
	case "headers":
		if f.mariaDB {
			return "JSON NOT NULL DEFAULT '{}'"
		}
		return "JSON NOT NULL DEFAULT ('{}')"
	case "retry_count":
		return "INT NOT NULL DEFAULT 0"
	case "available_at":
		return "DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6))"
	case "processed_at", "expires_at", "locked_until":
		return "DATETIME(6) NULL"
	case "unfinished":
		return "TINYINT GENERATED ALWAYS AS (status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED')) VIRTUAL"
	case "waiting_expires_at":
		return "DATETIME(6) GENERATED ALWAYS AS (IF(status IN ('PENDING', 'BLOCKED'), expires_at, NULL)) VIRTUAL"
	}
	return "TEXT NULL" // last_error
}

// Adopt brings the team's existing table to the outbox's shape in place,
// keeping every row and its state (PROCESSING becomes PENDING, audited),
// records version 1 as applied and applies the later migrations. MySQL
// commits each DDL statement by itself: a run interrupted half-way is
// finished by running it again.
func (s *Store) Adopt(ctx context.Context, o store.AdoptOptions) (store.AdoptResult, error) {
	var res store.AdoptResult
	if err := adoptsql.ValidateOptions(o); err != nil {
		return res, err
	}
	sc, err := s.InspectSchema(ctx)
	if err != nil {
		return res, err
	}
	r, err := s.migrator(ctx)
	if err != nil {
		return res, err
	}
	if res.AlreadyAdopted, err = adoptsql.CheckAdoptable(sc); err != nil {
		return res, err
	}
	var plan, processingTx []string
	if !res.AlreadyAdopted {
		if plan, processingTx, err = s.planAdoption(ctx, r, sc, o.AggregateType, &res); err != nil {
			return res, err
		}
	}
	later, err := r.PlanUp(ctx)
	if err != nil {
		return res, err
	}
	// The DDL up to the sibling tables; then the state mapping in one
	// transaction; then the indexes.
	split := len(plan)
	for i, q := range plan {
		if strings.HasPrefix(q, "ALTER TABLE "+quote(s.t.Outbox)+"\n    ADD") && strings.Contains(q, "ALGORITHM=INPLACE") {
			split = i
			break
		}
	}
	res.SQL = append(res.SQL, plan[:split]...)
	if len(processingTx) > 0 {
		res.SQL = append(res.SQL, "START TRANSACTION")
		res.SQL = append(res.SQL, processingTx...)
		res.SQL = append(res.SQL, "COMMIT")
	}
	res.SQL = append(res.SQL, plan[split:]...)
	res.SQL = append(res.SQL, adoptsql.AfterAdoptionSQL(s.t.Migrations, later)...)
	res.SQL = append(res.SQL, adoptSQL(s.t, "later_defaults"))
	if o.DryRun {
		return res, nil
	}
	run := func(q string) error {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("adopt %s: %s: %w (run outbox migrate --adopt again to finish; --down removes what was added)", s.t.Outbox, adoptsql.FirstLine(q), err)
		}
		return nil
	}
	for _, q := range plan[:split] {
		if err := run(q); err != nil {
			return res, err
		}
	}
	if len(processingTx) > 0 {
		tx, err := s.db.BeginTx(ctx, s.txOpts)
		if err != nil {
			return res, fmt.Errorf("adopt %s: begin: %w", s.t.Outbox, err)
		}
		for _, q := range processingTx {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				_ = tx.Rollback()
				return res, fmt.Errorf("adopt %s: %s: %w (run outbox migrate --adopt again to finish)", s.t.Outbox, adoptsql.FirstLine(q), err)
			}
		}
		if err := tx.Commit(); err != nil {
			return res, fmt.Errorf("adopt %s: commit: %w", s.t.Outbox, err)
		}
	}
	for _, q := range plan[split:] {
		if err := run(q); err != nil {
			return res, err
		}
	}
	if res.Applied, err = adoptsql.FinishAdoption(ctx, r); err != nil {
		return res, err
	}
	return res, s.dropAdoptedDefaults(ctx)
}

// dropAdoptedDefaults removes the defaults that adoption gave the columns
// available_at and event_id, once the insert trigger (migration 2) fills
// them itself. Until then the defaults keep the team's plain INSERT
// working. Afterwards they would be wrong: a default is applied before the
// trigger runs, so available_at would hold UTC_TIMESTAMP() and the trigger,
// which moves a producer's times from its session's zone to UTC, would move
// it once more (delivered hours late in a zone behind UTC), and event_id
// would be a version-1 UUID where the trigger makes a UUIDv7.
func (s *Store) dropAdoptedDefaults(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, adoptSQL(s.t, "record_defaults"))
	if err != nil {
		return fmt.Errorf("adopt %s: read the adoption record: %w", s.t.Outbox, err)
	}
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			rows.Close()
			return fmt.Errorf("adopt %s: read the adoption record: %w", s.t.Outbox, err)
		}
		cols = append(cols, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("adopt %s: read the adoption record: %w", s.t.Outbox, err)
	}
	for _, c := range cols {
		q := adoptSQL(s.t, "alter_outbox") + " ALTER COLUMN " + quote(c) + " DROP DEFAULT"
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("adopt %s: %s: %w (run outbox migrate --adopt again to finish)", s.t.Outbox, q, err)
		}
	}
	return nil
}

// planAdoption reads the table and returns the DDL that adopts it and the
// statements that map PROCESSING rows (one transaction). Only what is
// missing is added, so that a second run after an interruption finishes
// the first.
func (s *Store) planAdoption(ctx context.Context, r *migrate.Runner, sc store.Schema, aggregateType string, res *store.AdoptResult) ([]string, []string, error) {
	for _, c := range adoptsql.RequiredColumns {
		if slices.Contains(sc.Missing, c) {
			return nil, nil, fmt.Errorf("%w: cannot adopt table %s: it lacks the columns %s, which no default can fill (it needs at least %s); nothing was changed",
				store.ErrForeignTable, s.t.Outbox, strings.Join(sc.Missing, ", "), strings.Join(adoptsql.RequiredColumns, ", "))
		}
	}
	siblings := []string{s.t.DeadLetters, s.t.Attempts, s.t.Outbox + "_aggregate_locks"}
	if !sc.Adopted {
		for _, sib := range siblings {
			exists, err := s.tableExists(ctx, sib)
			if err != nil {
				return nil, nil, err
			}
			if exists {
				return nil, nil, fmt.Errorf("%w: cannot adopt table %s: table %s already exists and outbox did not create it; rename or drop it first, nothing was changed",
					store.ErrForeignTable, s.t.Outbox, sib)
			}
		}
	}
	counts, nulls, err := s.statusCounts(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := adoptsql.CheckStatuses(s.t.Outbox, counts, nulls); err != nil {
		return nil, nil, err
	}
	for _, n := range counts {
		res.Rows += n
	}
	res.Requeued = counts["PROCESSING"]
	res.DeadLettered = counts["FAILED"]
	res.Finished = counts["PROCESSED"] + counts["EXPIRED"] + counts["SKIPPED"]
	f, err := serverFlavor(ctx, s.db)
	if err != nil {
		return nil, nil, fmt.Errorf("adopt: %w", err)
	}
	_, nullable, _, err := s.columnsOf(ctx, s.t.Outbox)
	if err != nil {
		return nil, nil, err
	}
	indexes, err := s.indexes(ctx)
	if err != nil {
		return nil, nil, err
	}
	first, err := r.UpSQL(1)
	if err != nil {
		return nil, nil, err
	}
	var siblingSQL, addIndexes, record []string
	for _, st := range migrate.Statements(first) {
		for _, sib := range siblings {
			if strings.Contains(st, " INTO "+quote(sib)+" ") || strings.HasPrefix(st, "CREATE TABLE IF NOT EXISTS "+quote(sib)+" ") {
				siblingSQL = append(siblingSQL, st)
			}
		}
	}
	for _, x := range outboxIndexes {
		name := x.name(s.t.Outbox)
		if slices.Contains(indexes, name) {
			continue
		}
		kind := "INDEX"
		if x.unique {
			kind = "UNIQUE INDEX"
		}
		addIndexes = append(addIndexes, "ADD "+kind+" "+quote(name)+" ("+x.columns+")")
		record = append(record, "('index', '"+name+"')")
	}
	plan := []string{adoptSQL(s.t, "record_table")}
	var adds []string
	for _, c := range sc.Missing {
		adds = append(adds, "ADD COLUMN "+quote(c)+" "+adoptColumn(c, aggregateType, f))
		record = append(record, "('column', '"+c+"')")
	}
	if !sc.Adopted {
		for _, sib := range siblings {
			record = append(record, "('table', '"+sib+"')")
		}
	}
	if len(record) > 0 {
		// Written before the DDL it describes, so that --down also removes
		// what an interrupted run added.
		plan = append(plan, adoptSQL(s.t, "record_insert")+"\n    "+strings.Join(record, ",\n    "))
	}
	if len(adds) > 0 {
		plan = append(plan, adoptSQL(s.t, "alter_outbox")+"\n    "+strings.Join(adds, ",\n    "))
	}
	if slices.Contains(sc.Missing, "event_id") || nullable["event_id"] {
		plan = append(plan, adoptSQL(s.t, "backfill_event_id"), adoptSQL(s.t, "event_id_not_null"))
	}
	if nullable["retry_count"] {
		plan = append(plan, adoptSQL(s.t, "backfill_retry_count"))
	}
	plan = append(plan, siblingSQL...)
	if len(addIndexes) > 0 {
		plan = append(plan, adoptSQL(s.t, "alter_outbox")+"\n    "+strings.Join(addIndexes, ",\n    ")+",\n    ALGORITHM=INPLACE, LOCK=NONE")
	}
	processingTx := []string{
		adoptSQL(s.t, "audit_processing"),
		adoptSQL(s.t, "release_processing"),
	}
	return plan, processingTx, nil
}
