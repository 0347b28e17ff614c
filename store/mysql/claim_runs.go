package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/lanes"
)

// runRead is what a claim's read knows when it reads the runs: the rows
// read so far (the window's and the busy ones) and, per aggregate of the
// window, its rows among them and the window row that names it.
type runRead struct {
	q     lanes.ReadQuery
	aggs  []aggKey
	known map[int64]lanes.Row
	byAgg map[aggKey][]int64
	first map[aggKey]int64
}

// add records a row the read found.
func (rd *runRead) add(r lanes.Row) {
	if _, seen := rd.known[r.ID]; seen {
		return
	}
	rd.known[r.ID] = r
	k := aggKey{r.Agg.Type, r.Agg.ID}
	rd.byAgg[k] = append(rd.byAgg[k], r.ID)
}

// readRuns reads each aggregate's first n = q.RunLen(aggregates)
// unfinished rows in id order (FAILED counts when FailedBlocks), as
// SQLite's claim.read does, without one statement per aggregate in the
// common case (MariaDB has no LATERAL join, and a statement of one part
// per aggregate costs a planning of each part):
//
//   - the gaps (claim.gaps): per aggregate, its first unfinished row that
//     is neither in the window nor busy, one index descent each. Every
//     unfinished row of the aggregate before its gap was read already, so
//     those rows and the gap are a prefix of its unfinished rows; when
//     the prefix holds n rows, or the aggregate has no gap (the prefix is
//     all of them), the run is its first n rows;
//   - the others (a gap within the first n, which is not the aggregate's
//     last row: rare, as the window holds the first due rows) read their
//     first n ids from the aggregate index, one part each, and the rows
//     not yet read by primary key.
//
// A run row of a lane the relay does not hold (an aggregate's lane cannot
// change, but an adopted table's collation may let two spellings of an id
// be one aggregate) reads as PROCESSING: it holds the run back, and
// nothing is claimed outside the relay's lanes.
func (s *Store) readRuns(ctx context.Context, tx *sql.Tx, rd *runRead) ([]lanes.Row, error) {
	q := rd.q
	n := q.RunLen(len(rd.aggs))
	gaps, err := s.readGaps(ctx, tx, rd)
	if err != nil {
		return nil, err
	}
	runs := map[aggKey][]int64{}
	var exact []aggKey
	for _, k := range rd.aggs {
		pre := slices.Clone(rd.byAgg[k])
		slices.Sort(pre)
		gap, hasGap := gaps[k]
		if hasGap {
			pre = slices.DeleteFunc(pre, func(id int64) bool { return id > gap.ID })
			pre = append(pre, gap.ID)
		}
		switch {
		case len(pre) >= n:
			runs[k] = pre[:n]
		case !hasGap:
			runs[k] = pre
		default:
			exact = append(exact, k)
		}
	}
	if len(exact) > 0 {
		if err := s.readExactRuns(ctx, tx, rd, n, exact, runs); err != nil {
			return nil, err
		}
	}
	held := make(map[int]bool, len(q.Lanes))
	for _, l := range q.Lanes {
		held[l.Lane] = true
	}
	var out []lanes.Row
	for _, k := range rd.aggs {
		for _, id := range runs[k] {
			r, ok := rd.known[id]
			if !ok {
				continue
			}
			r.Part = lanes.PartRun
			if !held[r.Lane] {
				r.Status = outbox.StatusProcessing
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// readGaps reads the gap of each aggregate of rd that has one, and adds
// the gap rows to rd.known.
func (s *Store) readGaps(ctx context.Context, tx *sql.Tx, rd *runRead) (map[aggKey]lanes.Row, error) {
	firsts := make([]int64, 0, len(rd.aggs))
	byFirst := make(map[int64]aggKey, len(rd.aggs))
	for _, k := range rd.aggs {
		firsts = append(firsts, rd.first[k])
		byFirst[rd.first[k]] = k
	}
	known := make([]int64, 0, len(rd.known))
	for id := range rd.known {
		known = append(known, id)
	}
	slices.Sort(known)
	f := fragments{IDs: idList(known), Marks: idList(firsts)}
	if !rd.q.FailedBlocks {
		f.Cond = " AND x.status <> 'FAILED'"
	}
	query, err := s.q.render("claim.gaps", f)
	if err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	gaps := map[aggKey]lanes.Row{}
	for rows.Next() {
		var (
			first int64
			gap   sql.NullString
		)
		if err := rows.Scan(&first, &gap); err != nil {
			return nil, err
		}
		k, ok := byFirst[first]
		if !ok || !gap.Valid {
			continue
		}
		r, err := parseGap(gap.String)
		if err != nil {
			return nil, err
		}
		r.Agg = lanes.Key{Type: k.typ, ID: k.id}
		gaps[k] = r
		if _, seen := rd.known[r.ID]; !seen {
			rd.known[r.ID] = r
		}
	}
	return gaps, rows.Err()
}

// parseGap reads claim.gaps' "id,lane,status,available_at".
func parseGap(v string) (lanes.Row, error) {
	var r lanes.Row
	parts := strings.SplitN(v, ",", 4)
	if len(parts) != 4 {
		return r, fmt.Errorf("cannot read the gap row %q", v)
	}
	id, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return r, fmt.Errorf("cannot read the gap row %q: %w", v, err)
	}
	lane, err := strconv.Atoi(parts[1])
	if err != nil {
		return r, fmt.Errorf("cannot read the gap row %q: %w", v, err)
	}
	var at nullTime
	if err := at.parse(parts[3]); err != nil {
		return r, err
	}
	r.ID, r.Lane, r.Status, r.AvailableAt = id, lane, outbox.Status(parts[2]), at.Time
	return r, nil
}

// readExactRuns reads the first n unfinished ids of each aggregate of aggs
// from the aggregate index (one part each, numbered), then the rows not yet
// known by primary key, and sets their runs.
func (s *Store) readExactRuns(ctx context.Context, tx *sql.Tx, rd *runRead, n int, aggs []aggKey, runs map[aggKey][]int64) error {
	args := make([]any, 0, 2*len(aggs))
	for _, k := range aggs {
		args = append(args, k.typ, k.id)
	}
	query, err := statements.RenderNamed("claim.runs", runsParams{Tables: s.t, Parts: make([]struct{}, len(aggs)), Limit: n, FailedBlocks: rd.q.FailedBlocks})
	if err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	type partID struct {
		part int
		id   int64
	}
	var found []partID
	var missing []int64
	for rows.Next() {
		var p partID
		if err := rows.Scan(&p.part, &p.id); err != nil {
			rows.Close()
			return err
		}
		found = append(found, p)
		if _, ok := rd.known[p.id]; !ok {
			missing = append(missing, p.id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		query, err := s.q.byIDs("claim.run_rows", slices.Compact(missing))
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, query)
		if err != nil {
			return err
		}
		for rows.Next() {
			r, _, err := scanClaimRow(rows)
			if err != nil {
				rows.Close()
				return err
			}
			rd.known[r.ID] = r
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	for _, k := range aggs {
		runs[k] = nil
	}
	for _, p := range found {
		if p.part >= 0 && p.part < len(aggs) {
			runs[aggs[p.part]] = append(runs[aggs[p.part]], p.id)
		}
	}
	for _, k := range aggs {
		slices.SortFunc(runs[k], func(a, b int64) int { return cmp.Compare(a, b) })
		runs[k] = slices.Compact(runs[k])
	}
	return nil
}

// runsParams render claim.runs: one part per aggregate of Parts.
type runsParams struct {
	store.Tables
	Parts        []struct{}
	Limit        int
	FailedBlocks bool
}
