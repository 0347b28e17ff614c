package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/pages"
)

// MoveToHistory implements store.Store. It walks the table in id order as
// Purge does, one short write transaction per batch: the batch's rows are
// copied into the history with their attempts, then deleted from the hot
// tables. SQLite's one writer means no row of the batch changes between
// the read and the delete.
func (s *Store) MoveToHistory(ctx context.Context, req store.HistoryMoveRequest) (int64, error) {
	req, err := req.Normalize()
	if err != nil {
		return 0, err
	}
	total, err := pages.Purge(func(after int64) (p pages.PurgePage, err error) {
		err = s.writeTx(ctx, func(c *sql.Conn, now string) error {
			p = pages.PurgePage{}
			var cutoff string
			if err := c.QueryRowContext(ctx, s.q.purgeCutoff, now, modifier(-req.OlderThan)).Scan(&cutoff); err != nil {
				return err
			}
			rows, err := c.QueryContext(ctx, s.q.historyPage, after, req.BatchSize, cutoff)
			if err != nil {
				return err
			}
			var ids []int64
			for rows.Next() {
				var id int64
				var move, isOld bool
				if err := rows.Scan(&id, &move, &isOld); err != nil {
					rows.Close()
					return err
				}
				p.Last = id
				if isOld {
					p.Old++
				}
				if move {
					ids = append(ids, id)
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil || len(ids) == 0 {
				return err
			}
			idsJSON, err := json.Marshal(ids)
			if err != nil {
				return err
			}
			for _, q := range []string{s.q.historyInsertEvents, s.q.historyInsertAttempts, s.q.historyDeleteAttempts} {
				if _, err := c.ExecContext(ctx, q, string(idsJSON)); err != nil {
					return err
				}
			}
			p.Deleted, err = execCount(ctx, c, s.q.historyDeleteEvents, string(idsJSON))
			return err
		})
		if err == nil && p.Deleted > 0 && req.Progress != nil {
			req.Progress(p.Deleted)
		}
		return p, err
	})
	return total, s.wrap("move to history", err)
}

// HistoryMonths implements store.Store with exact counts, read by the
// month indexes.
func (s *Store) HistoryMonths(ctx context.Context) ([]store.HistoryMonth, error) {
	var out []store.HistoryMonth
	err := retryBusy(ctx, func() error {
		out = nil
		rows, err := s.db.QueryContext(ctx, s.q.historyMonths)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var suffix string
			var m store.HistoryMonth
			if err := rows.Scan(&suffix, &m.Events, &m.Attempts); err != nil {
				return err
			}
			if _, m.Month, err = backend.ParseHistoryMonth(s.t, suffix); err != nil {
				return err
			}
			out = append(out, m)
		}
		return rows.Err()
	})
	return out, s.wrap("history months", err)
}

// DropHistoryBefore implements store.Store: in one write transaction,
// each month that ends at or before cutoff is deleted whole by its month
// index and recorded in <outbox>_history_drops.
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
	err = s.writeTx(ctx, func(c *sql.Conn, _ string) error {
		drop.Months = drop.Months[:0]
		for _, hm := range doomed {
			month := backend.HistoryMonthOf(s.t, hm.Month).Month
			got := store.HistoryMonth{Month: hm.Month}
			var err error
			if got.Events, err = execCount(ctx, c, s.q.historyDropEvents, month); err != nil {
				return err
			}
			if got.Attempts, err = execCount(ctx, c, s.q.historyDropAttempts, month); err != nil {
				return err
			}
			if _, err := c.ExecContext(ctx, s.q.historyRecordDrop, month, got.Events, got.Attempts, formatTime(cutoff)); err != nil {
				return err
			}
			drop.Months = append(drop.Months, got)
		}
		return nil
	})
	if err != nil {
		return store.HistoryDrop{Cutoff: cutoff}, s.wrap("drop history", err)
	}
	return drop, nil
}

// eventFromHistory reads an event that is no longer in the hot table.
func (s *Store) eventFromHistory(ctx context.Context, id outbox.EventID) (store.Record, error) {
	var r store.Record
	err := retryBusy(ctx, func() error {
		var err error
		r, err = scanRecord(s.db.QueryRowContext(ctx, s.q.historyGetEvent, id.String()))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) || isGenericError(err, "no such table") {
		return r, backend.EventNotFound(id)
	}
	r.FromHistory = err == nil
	return r, s.wrap("get event from history", err)
}

// attemptsFromHistory reads the audit trail of an event from the history;
// none when the history does not exist (the table is not migrated yet).
func (s *Store) attemptsFromHistory(ctx context.Context, id outbox.EventID) ([]store.Attempt, error) {
	out, err := s.scanAttempts(ctx, s.q.historyAttempts, id)
	if isGenericError(err, "no such table") {
		return nil, nil
	}
	return out, err
}
