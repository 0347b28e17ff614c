package cdc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// errStandby: another relay holds the stream lease.
var errStandby = errors.New("another relay streams from the slot")

// recreateAfter is how many stream attempts in a row must fail with a
// decoding error at the same slot position before the slot is recreated.
const recreateAfter = 5

// streamError is an error the server sent on the replication stream (not a
// lost connection), with the position the stream started from.
type streamError struct {
	start pglogrepl.LSN
	err   *pgconn.PgError
}

func (e *streamError) Error() string { return "cdc: replication stream: " + e.err.Error() }
func (e *streamError) Unwrap() error { return e.err }

// undecodable reports whether the server failed to decode the slot's WAL:
// an internal error such as "could not map filenode to relation OID", or
// an object the change callback needs that did not exist at the decoded
// position, such as a publication dropped and created again ("publication
// ... does not exist"). Both recur at every restart from the same position.
func (e *streamError) undecodable() bool {
	return strings.HasPrefix(e.err.Code, "XX") || e.err.Code == "42704" // undefined_object
}

// Listen streams the outbox table's committed inserts until ctx ends and
// calls wake after each transaction that brought events. It first takes
// the stream lease; while another relay holds it, this one stands by
// (its Claim still runs the safety-net poll) and tries again every third
// of the lease. Lost connections (a PostgreSQL restart, a failover) are
// retried with backoff; the stream resumes from the slot's confirmed
// position. When the server fails to decode the slot's WAL at the same
// position recreateAfter attempts in a row (see streamError.undecodable),
// the slot is dropped and created at the current position; the events
// committed between come by the safety-net poll. It also wakes the relay
// every PollInterval for the safety-net poll. Listen returns nil when ctx
// ends.
func (s *Source) Listen(ctx context.Context, wake func()) error {
	s.wake.Store(&wake)
	// The safety net: wake the relay every PollInterval so that its claim
	// runs the ordinary poll, whatever the relay's own poll interval.
	pollDone := make(chan struct{})
	defer func() { <-pollDone }()
	go func() {
		defer close(pollDone)
		t := time.NewTicker(s.cfg.PollInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				wake()
			}
		}
	}()
	delay := time.Duration(0)
	standbyLogged := false
	var stuckAt pglogrepl.LSN // where the last stream failed to decode
	stuck := 0                // how many attempts in a row failed there
	for {
		err := s.leadAndStream(ctx, wake)
		if ctx.Err() != nil {
			return nil
		}
		var se *streamError
		switch {
		case errors.As(err, &se) && se.undecodable():
			if se.start != stuckAt {
				stuckAt, stuck = se.start, 0
			}
			stuck++
			if stuck >= recreateAfter {
				s.log.Warn("PostgreSQL cannot decode the replication slot's WAL; recreating the slot at the current position: events committed meanwhile come by the safety-net poll",
					"at_lsn", se.start.String(), "attempts", stuck, "err", se.err.Error())
				s.recreate.Store(true)
				stuckAt, stuck = 0, 0
				delay = 0 // the next attempt, on the new slot, comes at once
			}
		case !errors.Is(err, errStandby):
			stuckAt, stuck = 0, 0
		}
		wait := s.cfg.Lease / 3
		switch {
		case errors.Is(err, errStandby):
			if !standbyLogged {
				s.log.Info("standing by: another relay streams from the slot; taking over when its lease ends", "lease", s.cfg.Lease)
				standbyLogged = true
			}
			delay = 0
		case err != nil:
			delay = min(max(2*delay, 200*time.Millisecond), 10*time.Second)
			wait = delay
			s.log.Warn("logical replication stream stopped; reconnecting", "err", err, "retry_in", delay)
			standbyLogged = false
		default:
			delay = 0
		}
		s.refreshLag(ctx)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// leadAndStream takes the lease, then streams while it holds it.
func (s *Source) leadAndStream(ctx context.Context, wake func()) error {
	held, err := s.lease.acquire(ctx)
	if err != nil {
		return err
	}
	if !held {
		return errStandby
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lost := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.lease.keep(sctx, func() { close(lost); cancel() })
	}()
	defer func() {
		cancel()
		<-done
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		s.lease.release(rctx)
		rcancel()
	}()
	err = s.stream(sctx, wake)
	select {
	case <-lost:
		return fmt.Errorf("cdc: lost the stream lease of slot %s (renewals failed or another relay took it)", s.cfg.Slot)
	default:
	}
	return err
}

// stream runs one replication connection.
func (s *Source) stream(ctx context.Context, wake func()) error {
	pc := s.Pool().Config().ConnConfig.Config.Copy()
	if pc.RuntimeParams == nil {
		pc.RuntimeParams = map[string]string{}
	}
	pc.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return fmt.Errorf("cdc: open the replication connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	start, err := s.prepareSlot(ctx)
	if err != nil {
		return err
	}
	err = pglogrepl.StartReplication(ctx, conn, s.cfg.Slot, start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + s.cfg.Publication + "'"},
	})
	if err != nil {
		return slotBusy(s.cfg.Slot, err)
	}
	s.track.Reset()
	s.track.Idle(start)
	s.streaming.Store(true)
	defer s.streaming.Store(false)
	s.log.Info("streaming from the logical replication slot", "publication", s.cfg.Publication, "from_lsn", start.String())

	idCol := map[uint32]int{} // relation id -> index of the id column
	var ids []int64
	nextStatus := time.Now()
	for {
		now := time.Now()
		if !now.Before(nextStatus) {
			s.track.Expire(now)
			pos, _ := s.track.Position()
			if pos > 0 {
				if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: pos}); err != nil {
					return fmt.Errorf("cdc: send the standby status: %w", err)
				}
			}
			s.refreshLag(ctx)
			nextStatus = now.Add(s.cfg.StatusInterval)
		}
		if s.track.Queued() >= s.cfg.MaxQueued { // back pressure: let the relay catch up
			t := time.NewTimer(time.Until(nextStatus))
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-s.space:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		rctx, cancel := context.WithDeadline(ctx, nextStatus)
		raw, err := conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if pgconn.Timeout(err) && ctx.Err() == nil {
				continue
			}
			return fmt.Errorf("cdc: receive from the replication stream: %w", err)
		}
		switch m := raw.(type) {
		case *pgproto3.ErrorResponse:
			return &streamError{start: start, err: pgconn.ErrorResponseToPgError(m)}
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				continue
			}
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return fmt.Errorf("cdc: parse a keepalive: %w", err)
				}
				s.track.Idle(ka.ServerWALEnd)
				if ka.ReplyRequested {
					nextStatus = time.Time{}
				}
			case pglogrepl.XLogDataByteID:
				x, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					return fmt.Errorf("cdc: parse WAL data: %w", err)
				}
				if ids, err = s.decode(x.WALData, idCol, ids, wake); err != nil {
					return err
				}
			}
		}
	}
}

// decode handles one pgoutput message.
func (s *Source) decode(data []byte, idCol map[uint32]int, ids []int64, wake func()) ([]int64, error) {
	msg, err := pglogrepl.Parse(data)
	if err != nil {
		return ids, fmt.Errorf("cdc: decode a pgoutput message: %w", err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		idCol[m.RelationID] = -1 // another table of a shared publication
		if m.RelationName == s.Table() {
			idCol[m.RelationID] = -2 // the outbox, without an id column
			for i, c := range m.Columns {
				if c.Name == "id" {
					idCol[m.RelationID] = i
				}
			}
		}
	case *pglogrepl.BeginMessage:
		s.track.Begin()
		ids = ids[:0]
	case *pglogrepl.InsertMessage:
		i, ok := idCol[m.RelationID]
		if ok && i == -1 {
			return ids, nil // not the outbox
		}
		if !ok || i < 0 || m.Tuple == nil || i >= len(m.Tuple.Columns) {
			return ids, fmt.Errorf("cdc: an insert into the outbox table %s came without its id column", s.Table())
		}
		col := m.Tuple.Columns[i]
		if col.DataType != 't' {
			return ids, fmt.Errorf("cdc: an insert's id column is not in text format (kind %q)", col.DataType)
		}
		id, err := strconv.ParseInt(string(col.Data), 10, 64)
		if err != nil {
			return ids, fmt.Errorf("cdc: an insert's id %q is not an integer", col.Data)
		}
		ids = append(ids, id)
	case *pglogrepl.CommitMessage:
		n := s.track.Commit(m.TransactionEndLSN, ids)
		s.streamed.Add(int64(len(ids)))
		ids = ids[:0]
		if n > 0 {
			wake()
		}
	}
	return ids, nil
}

// prepareSlot makes sure the publication and the slot exist (after a
// primary failover or a restore the new server has no slot: it is created
// at the current position) and replaces a slot PostgreSQL invalidated
// (wal_status "lost", past max_slot_wal_keep_size) or cannot decode (see
// Listen). It returns the slot's confirmed position. Events committed while
// no slot followed them are rows in the table, PENDING: the safety-net poll
// delivers them.
func (s *Source) prepareSlot(ctx context.Context) (pglogrepl.LSN, error) {
	pool := s.Pool()
	if err := ensurePublication(ctx, pool, s.cfg.Publication, s.Table()); err != nil {
		return 0, err
	}
	if s.recreate.Load() {
		// The walsender of the failed stream may not have ended yet: then
		// the drop fails, and the next attempt tries again.
		if _, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, s.cfg.Slot); err != nil {
			return 0, fmt.Errorf("cdc: drop slot %s, whose WAL the server cannot decode: %w", s.cfg.Slot, err)
		}
		s.recreate.Store(false)
		s.recreated.Add(1)
	}
	if err := ensureSlot(ctx, pool, s.cfg.Slot); err != nil {
		return 0, err
	}
	var start pglogrepl.LSN
	var walStatus *string
	if err := pool.QueryRow(ctx, `SELECT COALESCE(confirmed_flush_lsn, '0/0'), wal_status FROM pg_replication_slots WHERE slot_name = $1`,
		s.cfg.Slot).Scan(&start, &walStatus); err != nil {
		return 0, fmt.Errorf("cdc: read slot %s: %w", s.cfg.Slot, err)
	}
	if walStatus != nil && *walStatus == "lost" {
		s.log.Warn("the replication slot was invalidated (it held more WAL than max_slot_wal_keep_size); recreating it: events committed meanwhile come by the safety-net poll")
		if _, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, s.cfg.Slot); err != nil {
			return 0, fmt.Errorf("cdc: drop the invalidated slot %s: %w", s.cfg.Slot, err)
		}
		return s.prepareSlot(ctx)
	}
	return start, nil
}

// refreshLag reads the slot's lag for SlotLagBytes.
func (s *Source) refreshLag(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	l, err := Lag(cctx, s.Pool(), s.cfg.Slot)
	if err != nil || !l.Exists {
		return
	}
	s.lagBytes.Store(l.Bytes)
	s.lagKnown.Store(true)
}
