package inbox

import (
	"context"
	"time"
)

// CleanupResult says what one Cleanup deleted.
type CleanupResult struct {
	// IDs is the number of event ids deleted (older than Retention).
	IDs int64
	// Sequences is the number of aggregates whose last sequence was
	// forgotten (idle longer than SequenceRetention, when set).
	Sequences int64
}

// Cleanup deletes the event ids recorded longer ago than Config.Retention
// (by the database's clock), and, when Config.SequenceRetention is set,
// the sequences of aggregates idle for longer than that. It deletes in
// pages of Config.CleanupBatch rows, each its own statement, so that it
// never holds many locks for long and can run beside the consumers; on
// PostgreSQL it skips rows another transaction holds. Run it periodically
// (hourly is plenty); an error leaves what was deleted deleted, and the
// next run continues.
//
// An id deleted here is forgotten: if its event is delivered again, it is
// handled again. Keep Retention above the longest time after which the
// producer may redeliver (see DefaultRetention).
func (ib *Inbox) Cleanup(ctx context.Context) (CleanupResult, error) {
	var res CleanupResult
	n, err := ib.cleanPages(ctx, ib.q.cleanIDs, ib.cfg.Retention)
	res.IDs = n
	if err != nil {
		return res, ib.wrap("delete event ids older than "+ib.cfg.Retention.String(), err)
	}
	if ib.cfg.SequenceRetention > 0 {
		n, err := ib.cleanPages(ctx, ib.q.cleanSequences, ib.cfg.SequenceRetention)
		res.Sequences = n
		if err != nil {
			return res, ib.wrap("delete sequences idle for "+ib.cfg.SequenceRetention.String(), err)
		}
	}
	return res, nil
}

func (ib *Inbox) cleanPages(ctx context.Context, query string, age time.Duration) (int64, error) {
	var total int64
	for {
		res, err := ib.db.ExecContext(ctx, query, age.Microseconds(), ib.cfg.CleanupBatch)
		if err != nil {
			return total, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, err
		}
		total += n
		if n < int64(ib.cfg.CleanupBatch) {
			return total, nil
		}
	}
}
