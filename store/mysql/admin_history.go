package mysql

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/pages"
)

// MoveToHistory implements store.Store. It walks the table in id order as
// Purge does: it reads a page without locks, adds the partitions of the
// months the page's rows need (DDL, which commits by itself, so before the
// batch's transaction), then moves the batch in one short transaction
// that locks its rows with SKIP LOCKED: the rows and their attempts are
// copied into the history and deleted from the hot tables.
func (s *Store) MoveToHistory(ctx context.Context, req store.HistoryMoveRequest) (int64, error) {
	req, err := req.Normalize()
	if err != nil {
		return 0, err
	}
	keep, err := s.purgeKeepCond(ctx, store.PurgeRequest{Adopted: req.Adopted})
	if err != nil {
		return 0, err
	}
	page, err := s.q.render("admin_history.page", fragments{Cond: keep})
	if err != nil {
		return 0, err
	}
	now := time.Now()
	if err := s.ensureHistoryMonths(ctx, []int{monthOf(now), monthOf(store.MonthStart(now).AddDate(0, 1, 0))}); err != nil {
		return 0, err
	}
	total, err := pages.Purge(func(after int64) (pages.PurgePage, error) {
		var (
			p      pages.PurgePage
			move   []int64
			months []int
			cutoff nullTime
		)
		rows, err := s.db.QueryContext(ctx, page, micros(req.OlderThan), after, req.BatchSize)
		if err != nil {
			return p, err
		}
		for rows.Next() {
			var (
				id, month  int64
				m, isOld   bool
				pageCutoff nullTime
			)
			if err := rows.Scan(&id, &m, &month, &isOld, &pageCutoff); err != nil {
				rows.Close()
				return p, err
			}
			p.Last, cutoff = id, pageCutoff
			if isOld {
				p.Old++
			}
			if m {
				move = append(move, id)
				months = append(months, int(month))
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(move) == 0 {
			return p, err
		}
		if err := s.ensureHistoryMonths(ctx, months); err != nil {
			return p, err
		}
		err = s.inTx(ctx, "move to history", func(tx *sql.Tx) error {
			p.Deleted = 0
			lock, err := s.q.render("admin_history.lock", fragments{IDs: idList(move), Cond: keep})
			if err != nil {
				return err
			}
			rows, err := tx.QueryContext(ctx, lock, formatTime(cutoff.Time))
			if err != nil {
				return err
			}
			var ids []int64
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				ids = append(ids, id)
			}
			rows.Close()
			if err := rows.Err(); err != nil || len(ids) == 0 {
				return err
			}
			for _, name := range []string{"admin_history.insert_events", "admin_history.insert_attempts", "admin_history.delete_attempts"} {
				q, err := s.q.render(name, fragments{IDs: idList(ids)})
				if err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, q); err != nil {
					return err
				}
			}
			del, err := s.q.render("admin_history.delete_events", fragments{IDs: idList(ids)})
			if err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, del)
			if err != nil {
				return err
			}
			p.Deleted, err = res.RowsAffected()
			return err
		})
		if err == nil && p.Deleted > 0 && req.Progress != nil {
			req.Progress(p.Deleted)
		}
		return p, err
	})
	return total, s.wrap("move to history", err)
}

// monthOf returns t's month as YYYYMM, in UTC.
func monthOf(t time.Time) int {
	t = t.UTC()
	return t.Year()*100 + int(t.Month())
}

// nextMonth returns the month after m (YYYYMM).
func nextMonth(m int) int {
	if m%100 >= 12 {
		return (m/100+1)*100 + 1
	}
	return m + 1
}

// partition is one monthly partition of a history table: p<YYYYMM>,
// holding the rows below its next month (the lowest also every older row).
type partition struct {
	month int
	rows  int64
}

// historyPartitions reads the monthly partitions of table, in order.
func (s *Store) historyPartitions(ctx context.Context, table string) ([]partition, error) {
	q, err := s.q.render("admin_history.partitions", fragments{})
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, q, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []partition
	for rows.Next() {
		var name, bound string
		var n int64
		if err := rows.Scan(&name, &bound, &n); err != nil {
			return nil, err
		}
		if m, ok := backend.MonthSuffix(name, "p"); ok {
			month, _ := strconv.Atoi(m)
			out = append(out, partition{month: month, rows: n})
		}
	}
	return out, rows.Err()
}

// ensureHistoryMonths adds the partitions of months that the two history
// tables lack, with every month between them and the existing ones, so
// that each month has its own: months above the highest split pmax (which
// is empty, as the mover keeps this month and the next ready), months
// below the lowest split the lowest partition.
func (s *Store) ensureHistoryMonths(ctx context.Context, months []int) error {
	for _, table := range []struct{ name, reorganize string }{
		{s.t.Outbox + "_history", "admin_history.reorganize_events"},
		{s.t.Outbox + "_attempts_history", "admin_history.reorganize_attempts"},
	} {
		parts, err := s.historyPartitions(ctx, table.name)
		if err != nil {
			return s.wrap("read the history partitions", err)
		}
		lo, hi := 0, 0
		if len(parts) > 0 {
			lo, hi = parts[0].month, parts[len(parts)-1].month
		}
		var below, above []int
		for _, m := range months {
			switch {
			case len(parts) == 0 || m > hi:
				above = append(above, m)
			case m < lo:
				below = append(below, m)
			}
		}
		if len(above) > 0 {
			last := slices.Max(above)
			start := slices.Min(above)
			if len(parts) > 0 {
				start = nextMonth(hi)
			}
			if err := s.reorganize(ctx, table.reorganize, "pmax", start, last, "MAXVALUE"); err != nil {
				return err
			}
		}
		if len(below) > 0 {
			start := slices.Min(below)
			if err := s.reorganize(ctx, table.reorganize, "p"+strconv.Itoa(lo), start, lo, strconv.Itoa(nextMonth(lo))); err != nil {
				return err
			}
		}
	}
	return nil
}

// reorganize splits partition from into one partition per month from
// first to last and from itself (bound: its own bound).
func (s *Store) reorganize(ctx context.Context, stmt, from string, first, last int, bound string) error {
	var specs []string
	for m := first; m <= last; m = nextMonth(m) {
		name := "p" + strconv.Itoa(m)
		if name == from {
			continue
		}
		spec, err := s.q.render("admin_history.partition", fragments{Cond: name, Values: strconv.Itoa(nextMonth(m))})
		if err != nil {
			return err
		}
		specs = append(specs, spec)
	}
	itself, err := s.q.render("admin_history.partition", fragments{Cond: from, Values: bound})
	if err != nil {
		return err
	}
	q, err := s.q.render(stmt, fragments{In: from, Values: strings.Join(append(specs, itself), ", ")})
	if err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, q); err != nil {
		return s.wrap("add history partitions", err)
	}
	return nil
}

// HistoryMonths implements store.Store with the estimates of
// information_schema.PARTITIONS: no partition is read.
func (s *Store) HistoryMonths(ctx context.Context) ([]store.HistoryMonth, error) {
	events, err := s.historyPartitions(ctx, s.t.Outbox+"_history")
	if err != nil {
		return nil, s.wrap("history months", err)
	}
	attempts, err := s.historyPartitions(ctx, s.t.Outbox+"_attempts_history")
	if err != nil {
		return nil, s.wrap("history months", err)
	}
	byMonth := map[int]*store.HistoryMonth{}
	get := func(m int) (*store.HistoryMonth, error) {
		if hm := byMonth[m]; hm != nil {
			return hm, nil
		}
		_, at, err := backend.ParseHistoryMonth(s.t, strconv.Itoa(m))
		if err != nil {
			return nil, err
		}
		byMonth[m] = &store.HistoryMonth{Month: at, Estimated: true}
		return byMonth[m], nil
	}
	for _, p := range events {
		hm, err := get(p.month)
		if err != nil {
			return nil, err
		}
		hm.Events = p.rows
	}
	for _, p := range attempts {
		hm, err := get(p.month)
		if err != nil {
			return nil, err
		}
		hm.Attempts = p.rows
	}
	out := make([]store.HistoryMonth, 0, len(byMonth))
	for _, hm := range byMonth {
		out = append(out, *hm)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Month.Before(out[j].Month) })
	return out, nil
}

// DropHistoryBefore implements store.Store: each month that ends at or
// before cutoff has its rows counted and its two partitions dropped whole
// (ALTER TABLE ... DROP PARTITION, which commits by itself), then a row in
// <outbox>_history_drops.
func (s *Store) DropHistoryBefore(ctx context.Context, cutoff time.Time) (store.HistoryDrop, error) {
	drop := store.HistoryDrop{Cutoff: cutoff}
	months, err := s.HistoryMonths(ctx)
	if err != nil {
		return drop, err
	}
	for _, hm := range store.MonthsBefore(months, cutoff) {
		name := "p" + backend.HistoryMonthOf(s.t, hm.Month).Month
		got := store.HistoryMonth{Month: hm.Month}
		f := fragments{In: name}
		for _, c := range []struct {
			stmt string
			n    *int64
		}{{"admin_history.count_events", &got.Events}, {"admin_history.count_attempts", &got.Attempts}} {
			q, err := s.q.render(c.stmt, f)
			if err != nil {
				return drop, err
			}
			if err := s.db.QueryRowContext(ctx, q).Scan(c.n); err != nil {
				return drop, s.wrap("drop history: count "+name, err)
			}
		}
		for _, stmt := range []string{"admin_history.drop_events", "admin_history.drop_attempts"} {
			q, err := s.q.render(stmt, f)
			if err != nil {
				return drop, err
			}
			if _, err := s.db.ExecContext(ctx, q); err != nil {
				return drop, s.wrap("drop history: drop "+name, err)
			}
		}
		drop.Months = append(drop.Months, got)
		rec, err := s.q.render("admin_history.record_drop", fragments{})
		if err != nil {
			return drop, err
		}
		if _, err := s.db.ExecContext(ctx, rec, monthOf(hm.Month), got.Events, got.Attempts, formatTime(cutoff)); err != nil {
			return drop, s.wrap("drop history: record the drop of "+name+" (dropped)", err)
		}
	}
	return drop, nil
}

// eventFromHistory reads an event that is no longer in the hot table.
func (s *Store) eventFromHistory(ctx context.Context, id outbox.EventID) (store.Record, error) {
	q, err := s.q.render("admin_history.get_event", fragments{})
	if err != nil {
		return store.Record{}, err
	}
	r, err := scanRecord(s.db.QueryRowContext(ctx, q, id.String()))
	if errors.Is(err, sql.ErrNoRows) || mysqlErrorNumber(err) == errNoSuchTable {
		return r, backend.EventNotFound(id)
	}
	r.FromHistory = err == nil
	return r, s.wrap("get event from history", err)
}

// attemptsFromHistory reads the audit trail of an event from the history;
// none when the history does not exist (the table is not migrated yet).
func (s *Store) attemptsFromHistory(ctx context.Context, id outbox.EventID) ([]store.Attempt, error) {
	q, err := s.q.render("admin_history.attempts", fragments{})
	if err != nil {
		return nil, err
	}
	out, err := s.scanAttempts(ctx, q, id)
	if mysqlErrorNumber(err) == errNoSuchTable {
		return nil, nil
	}
	return out, err
}
