package postgres

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/pages"
)

// historySQL renders a statement of the history with one month's names.
func historySQL(name string, m backend.HistoryMonth) string {
	return statements.MustRenderNamed("admin_history."+name, m)
}

// MoveToHistory implements store.Store. It walks the table in id order as
// Purge does; before each page it creates the partitions the page's rows
// need, and this month's and the next.
func (s *Store) MoveToHistory(ctx context.Context, req store.HistoryMoveRequest) (int64, error) {
	req, err := req.Normalize()
	if err != nil {
		return 0, err
	}
	keepBefore, err := s.purgeKeepsBefore(ctx, store.PurgeRequest{Adopted: req.Adopted})
	if err != nil {
		return 0, err
	}
	dbNow, err := s.dbNow(ctx)
	if err != nil {
		return 0, s.wrap("move to history", err)
	}
	if err := s.ensureHistoryMonths(ctx, backend.MonthsAhead(s.t, dbNow)); err != nil {
		return 0, err
	}
	age := req.OlderThan.Microseconds()
	keptDelivery := dbNow.Add(-req.OlderThan)
	total, err := pages.Purge(func(after int64) (p pages.PurgePage, err error) {
		if err := s.ensurePageMonths(ctx, after, req.BatchSize, age, keepBefore); err != nil {
			return p, err
		}
		var kept *time.Time
		err = s.pool.QueryRow(ctx, s.q.historyMove, after, req.BatchSize, age, keepBefore).Scan(&p.Deleted, &p.Last, &p.Old, &kept)
		if kept != nil && kept.Before(keptDelivery) {
			keptDelivery = *kept
		}
		if err == nil && p.Deleted > 0 && req.Progress != nil {
			req.Progress(p.Deleted)
		}
		return p, err
	})
	if err != nil {
		return total, s.wrap("move to history", err)
	}
	// The deliveries' rows go once every event they record moved: those
	// completed before the cutoff, but for the rows a held row still needs.
	for {
		tag, err := s.pool.Exec(ctx, s.q.historyPurgeDeliveries, keptDelivery, req.BatchSize)
		if err != nil {
			return total, s.wrap("move to history: delete the deliveries' rows", err)
		}
		if tag.RowsAffected() < int64(req.BatchSize) {
			break
		}
	}
	return total, nil
}

func (s *Store) dbNow(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := s.pool.QueryRow(ctx, s.q.historyNow).Scan(&now)
	return now, err
}

// ensurePageMonths creates the partitions of the months the page's
// movable rows finished in.
func (s *Store) ensurePageMonths(ctx context.Context, after int64, limit int, age int64, keepBefore *time.Time) error {
	rows, err := s.pool.Query(ctx, s.q.historyMonths, after, limit, age, keepBefore)
	if err != nil {
		return s.wrap("move to history: months", err)
	}
	suffixes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return s.wrap("move to history: months", err)
	}
	var ms []backend.HistoryMonth
	for _, suffix := range suffixes {
		m, _, err := backend.ParseHistoryMonth(s.t, suffix)
		if err != nil {
			return err
		}
		ms = append(ms, m)
	}
	return s.ensureHistoryMonths(ctx, ms)
}

// ensureHistoryMonths creates the partitions of ms that this store has not
// seen yet.
func (s *Store) ensureHistoryMonths(ctx context.Context, ms []backend.HistoryMonth) error {
	for _, m := range ms {
		if _, ok := s.historyParts.Load(m.Month); ok {
			continue
		}
		for _, name := range []string{"create_events", "create_attempts"} {
			if _, err := s.pool.Exec(ctx, historySQL(name, m)); err != nil {
				return s.wrap("create the history partition of "+m.Month, err)
			}
		}
		s.historyParts.Store(m.Month, true)
	}
	return nil
}

// HistoryMonths implements store.Store with the planner's estimates
// (pg_class.reltuples): no partition is read.
func (s *Store) HistoryMonths(ctx context.Context) ([]store.HistoryMonth, error) {
	rows, err := s.pool.Query(ctx, s.q.historyPartitions, quote(s.t.Outbox+"_history"), quote(s.t.Outbox+"_attempts_history"))
	if err != nil {
		return nil, s.wrap("history months", err)
	}
	defer rows.Close()
	byMonth := map[string]*store.HistoryMonth{}
	for rows.Next() {
		var kind, name string
		var estimate int64
		if err := rows.Scan(&kind, &name, &estimate); err != nil {
			return nil, s.wrap("history months", err)
		}
		prefix := s.t.Outbox + "_history_"
		if kind == "a" {
			prefix = s.t.Outbox + "_history_a_"
		}
		suffix, ok := backend.MonthSuffix(name, prefix)
		if !ok {
			continue
		}
		_, at, err := backend.ParseHistoryMonth(s.t, suffix)
		if err != nil {
			return nil, err
		}
		m := byMonth[suffix]
		if m == nil {
			m = &store.HistoryMonth{Month: at, Estimated: true}
			byMonth[suffix] = m
		}
		estimate = max(estimate, 0)
		if kind == "a" {
			m.Attempts = estimate
		} else {
			m.Events = estimate
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("history months", err)
	}
	out := make([]store.HistoryMonth, 0, len(byMonth))
	for _, m := range byMonth {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Month.Before(out[j].Month) })
	return out, nil
}

// DropHistoryBefore implements store.Store: in one transaction, each month
// that ends at or before cutoff has its rows counted, its two partitions
// dropped (DROP TABLE: no row is deleted one by one) and a row in
// <outbox>_history_drops.
func (s *Store) DropHistoryBefore(ctx context.Context, cutoff time.Time) (store.HistoryDrop, error) {
	drop := store.HistoryDrop{Cutoff: cutoff}
	months, err := s.HistoryMonths(ctx)
	if err != nil {
		return drop, err
	}
	doomed := store.MonthsBefore(months, cutoff)
	if len(doomed) == 0 {
		return drop, nil
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		drop.Months = drop.Months[:0]
		if _, err := tx.Exec(ctx, s.q.historyLockTimeout); err != nil {
			return err
		}
		for _, hm := range doomed {
			m := backend.HistoryMonthOf(s.t, hm.Month)
			got := store.HistoryMonth{Month: hm.Month}
			if err := tx.QueryRow(ctx, historySQL("count_events", m)).Scan(&got.Events); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, historySQL("count_attempts", m)).Scan(&got.Attempts); err != nil {
				return err
			}
			for _, name := range []string{"drop_events", "drop_attempts"} {
				if _, err := tx.Exec(ctx, historySQL(name, m)); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, s.q.historyRecordDrop, hm.Month, got.Events, got.Attempts, cutoff); err != nil {
				return err
			}
			drop.Months = append(drop.Months, got)
		}
		return nil
	})
	if err != nil {
		return store.HistoryDrop{Cutoff: cutoff}, s.wrap("drop history", err)
	}
	for _, m := range drop.Months {
		s.historyParts.Delete(backend.HistoryMonthOf(s.t, m.Month).Month)
	}
	return drop, nil
}

// eventFromHistory reads an event that is no longer in the hot table.
func (s *Store) eventFromHistory(ctx context.Context, id outbox.EventID) (store.Record, error) {
	r, err := scanRecord(s.pool.QueryRow(ctx, s.q.historyGetEvent, id.String()))
	if errors.Is(err, pgx.ErrNoRows) || undefinedTable(err) {
		return r, backend.EventNotFound(id)
	}
	r.FromHistory = err == nil
	return r, s.wrap("get event from history", err)
}

// attemptsFromHistory reads the audit trail of an event from the history;
// none when the history does not exist (the table is not migrated yet).
func (s *Store) attemptsFromHistory(ctx context.Context, id outbox.EventID) ([]store.Attempt, error) {
	out, err := s.scanAttempts(ctx, s.q.historyAttempts, id)
	if undefinedTable(err) {
		return nil, nil
	}
	return out, err
}

func undefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == sqlstateUndefinedTable
}
