package binlog

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// errStandby: another relay holds the stream lease.
var errStandby = errors.New("another relay reads the binary log")

// Listen reads the outbox table's committed inserts from the binary log
// until ctx ends and calls wake after each transaction that brought
// events. It first takes the stream lease; while another relay holds it,
// this one stands by (its Claim still runs the safety-net poll) and tries
// again every third of the lease. A lost connection (a server restart, a
// failover) is retried with backoff from the saved position. A saved
// position the server has purged is logged at ERROR and counted
// (PositionsPurged); the source then polls the table until a poll finds
// nothing, so nothing is lost, and reads the binary log from the server's
// current position. It also wakes the relay every PollInterval for the
// safety-net poll. Listen returns nil when ctx ends.
func (s *Source) Listen(ctx context.Context, wake func()) error {
	s.wake.Store(&wake)
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
	for {
		err := s.leadAndStream(ctx, wake)
		if ctx.Err() != nil {
			return nil
		}
		wait := s.cfg.Lease / 3
		switch {
		case errors.Is(err, errStandby):
			if !standbyLogged {
				s.log.Info("standing by: another relay reads the binary log; taking over when its lease ends", "lease", s.cfg.Lease)
				standbyLogged = true
			}
			delay = 0
		case errors.Is(err, ErrPositionPurged):
			delay, wait = 0, 0 // the next stream starts at the current position
		case err != nil:
			delay = min(max(2*delay, 200*time.Millisecond), 10*time.Second)
			wait = delay
			s.log.Warn("binary log stream stopped; reconnecting", "err", err, "retry_in", delay)
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
		s.savePosition(rctx)
		s.lease.release(rctx)
		rcancel()
	}()
	err = s.stream(sctx, wake)
	select {
	case <-lost:
		return fmt.Errorf("binlog: lost the stream lease %s (renewals failed or another relay took it)", s.lease.slot)
	default:
	}
	return err
}

// startPosition is the saved position, or, when none was saved, the
// server's current one (saved at once: the table holds what came before,
// and the first claims poll it).
func (s *Source) startPosition(ctx context.Context) (Position, error) {
	pos, ok, err := s.positions.load(ctx)
	if err != nil || ok {
		return pos, err
	}
	if pos, err = s.reader.CurrentPosition(ctx); err != nil {
		return pos, err
	}
	if _, err := s.positions.save(ctx, pos, s.cfg.HolderID); err != nil {
		return pos, err
	}
	return pos, nil
}

// fallBack handles a saved position the server no longer has: the
// events committed since are rows in the table, so the source polls the
// table until a poll finds nothing and saves the server's current
// position for the next stream.
func (s *Source) fallBack(ctx context.Context, from Position, cause error) error {
	s.purged.Add(1)
	s.catchUp.Store(true)
	s.wakeRelay()
	now, err := s.reader.CurrentPosition(ctx)
	if err != nil {
		return err
	}
	s.log.Error("the saved binary log position is no longer on the server (purged: PURGE BINARY LOGS, binlog_expire_logs_seconds or expire_logs_days); falling back to polling the table for the events committed since, nothing is lost; the stream resumes from the server's current position",
		"saved_position", from.String(), "resume_position", now.String(), "err", cause.Error())
	s.track.ResetAt(now)
	if _, err := s.positions.save(ctx, now, s.cfg.HolderID); err != nil {
		return err
	}
	return fmt.Errorf("%w (fell back to polling)", ErrPositionPurged)
}

// stream runs one replication connection from the saved position.
func (s *Source) stream(ctx context.Context, wake func()) error {
	start, err := s.startPosition(ctx)
	if err != nil {
		return err
	}
	s.saved.Store(&start)
	st, err := s.reader.Start(ctx, start)
	if errors.Is(err, ErrPositionPurged) {
		return s.fallBack(ctx, start, err)
	}
	if err != nil {
		return err
	}
	defer st.Close()
	s.track.ResetAt(start)
	s.streaming.Store(true)
	defer s.streaming.Store(false)
	s.log.Info("reading the binary log", "from_position", start.String(), "server_id", s.reader.ServerID())

	nextStatus := time.Now().Add(s.cfg.StatusInterval)
	for {
		if now := time.Now(); !now.Before(nextStatus) {
			s.track.Expire(now)
			if p, ok := st.Idle(); ok {
				s.track.Idle(p)
			}
			s.savePosition(ctx)
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
		tx, err := st.Next(rctx)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			continue
		case errors.Is(err, ErrPositionPurged):
			return s.fallBack(ctx, start, err)
		default:
			return err
		}
		n := s.track.Commit(tx.Position, tx.IDs)
		s.streamed.Add(int64(len(tx.IDs)))
		if n > 0 {
			wake()
		}
	}
}

// savePosition saves the tracker's confirmed position when it moved.
func (s *Source) savePosition(ctx context.Context) {
	pos, _ := s.track.Position()
	if pos.IsZero() || pos == s.SavedPosition() {
		return
	}
	ok, err := s.positions.save(ctx, pos, s.cfg.HolderID)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("saving the binary log position failed; retrying at the next status interval", "err", err)
		}
		return
	}
	if ok {
		s.saved.Store(&pos)
	}
}

// refreshLag reads how far the saved position is behind the server.
func (s *Source) refreshLag(ctx context.Context) {
	pos := s.SavedPosition()
	if pos.IsZero() {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	n, err := LagBytes(cctx, s.DB(), pos)
	if err != nil {
		return
	}
	s.lagBytes.Store(n)
	s.lagKnown.Store(true)
}
