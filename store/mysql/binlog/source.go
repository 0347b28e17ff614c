package binlog

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/mysql"
)

// SourceConfig configures a Source. Zero values mean the documented
// defaults.
type SourceConfig struct {
	// DSN is the server's address and credentials for the replication
	// connection, as for Config.DSN: usually the DSN the store was opened
	// with. Its user needs REPLICATION SLAVE and REPLICATION CLIENT
	// (MariaDB 10.5+: BINLOG MONITOR). Required.
	DSN string
	// ServerID is the replica server id the relay reads the binary log
	// under (see Config.ServerID); zero picks a random one.
	ServerID uint32
	// PollInterval is the safety net: how often the ordinary claim runs to
	// pick up what the stream handed back (retries, events held behind an
	// earlier one of their aggregate). Default 5s.
	PollInterval time.Duration
	// Lease is how long the stream lease lasts: a standby relay takes over
	// within about this long after the reading one dies. Default 15s.
	Lease time.Duration
	// HolderID names this relay in the lease; default a fresh relay id.
	HolderID string
	// StatusInterval is how often the position is saved (when it moved)
	// and the lag read. Default 1s.
	StatusInterval time.Duration
	// MaxQueued bounds the streamed events waiting to be claimed; the
	// stream stops reading while it is reached. Default 20000.
	MaxQueued int
	// Logger receives the source's logs. Default slog.Default().
	Logger *slog.Logger
}

// Source defaults.
const (
	DefaultPollInterval   = 5 * time.Second
	DefaultLease          = 15 * time.Second
	DefaultStatusInterval = time.Second
	DefaultMaxQueued      = 20000
)

// Source is a store.Store for the relay that learns of new events from
// the binary log: `outbox relay --source binlog`. Its Listen reads the
// outbox table's committed inserts under the stream lease; its Claim
// claims the streamed rows by id (in commit order, under Claim's ordering
// rules), and runs the ordinary claim every PollInterval as the safety
// net, and on every call while it catches up (at start, and after the
// saved position was purged). Everything else is the MySQL store's.
type Source struct {
	*mysql.Store
	cfg       SourceConfig
	log       *slog.Logger
	reader    *Reader
	lease     streamLease
	positions positionStore

	track    *tracker
	space    chan struct{} // signalled when a claim took from the queue
	pollMu   sync.Mutex
	lastPoll time.Time
	catchUp  atomic.Bool // poll on every claim until a poll finds nothing

	wake      atomic.Pointer[func()]
	streaming atomic.Bool
	lagBytes  atomic.Int64
	lagKnown  atomic.Bool
	streamed  atomic.Int64
	byStream  atomic.Int64
	byPoll    atomic.Int64
	purged    atomic.Int64
	saved     atomic.Pointer[Position]
}

var (
	_ store.Store    = (*Source)(nil)
	_ store.Listener = (*Source)(nil)
)

// NewSource checks the server (CheckServer: binary log on, ROW format,
// FULL row image, server id, replication privileges: each missing one
// named with the statement that fixes it), creates the lease and position
// tables when they are missing, and returns the source. The store must be
// migrated.
func NewSource(ctx context.Context, st *mysql.Store, cfg SourceConfig) (*Source, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: binlog.NewSource needs a *mysql.Store", outbox.ErrInvalidConfig)
	}
	if cfg.DSN == "" {
		return nil, fmt.Errorf("%w: binlog.NewSource needs SourceConfig.DSN, the server to read the binary log from", outbox.ErrInvalidConfig)
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Lease == 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.StatusInterval == 0 {
		cfg.StatusInterval = DefaultStatusInterval
	}
	if cfg.MaxQueued == 0 {
		cfg.MaxQueued = DefaultMaxQueued
	}
	switch {
	case cfg.PollInterval < 10*time.Millisecond:
		return nil, fmt.Errorf("%w: binlog poll interval %s is too short: use at least 10ms", outbox.ErrInvalidConfig, cfg.PollInterval)
	case cfg.Lease < 300*time.Millisecond:
		return nil, fmt.Errorf("%w: binlog stream lease %s is too short: use at least 300ms", outbox.ErrInvalidConfig, cfg.Lease)
	case cfg.StatusInterval < 10*time.Millisecond || cfg.StatusInterval > time.Minute:
		return nil, fmt.Errorf("%w: binlog status interval %s is out of range: use 10ms to 1m", outbox.ErrInvalidConfig, cfg.StatusInterval)
	case cfg.MaxQueued < 1:
		return nil, fmt.Errorf("%w: binlog queue bound %d must be positive", outbox.ErrInvalidConfig, cfg.MaxQueued)
	}
	if cfg.HolderID == "" {
		cfg.HolderID = relay.NewRelayID()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	table := st.Table()
	if err := CheckServer(ctx, st.DB()); err != nil {
		return nil, err
	}
	if err := ensureTables(ctx, st.DB(), table); err != nil {
		return nil, err
	}
	r, err := Open(ctx, Config{DSN: cfg.DSN, Table: table, ServerID: cfg.ServerID, Logger: cfg.Logger.With("component", "go-mysql")})
	if err != nil {
		return nil, err
	}
	slot := table + "_binlog"
	s := &Source{
		Store:  st,
		cfg:    cfg,
		log:    cfg.Logger.With("stream", slot),
		reader: r,
		lease: streamLease{db: st.DB(), table: quoteName(table + "_cdc_lease"),
			slot: slot, holder: cfg.HolderID, length: cfg.Lease},
		positions: positionStore{db: st.DB(), table: quoteName(table + "_cdc_position"),
			lease: quoteName(table + "_cdc_lease"), slot: slot},
		track: newTracker(Position{}),
		space: make(chan struct{}, 1),
	}
	// What was committed while no relay read the binary log is in the
	// table: the first claims poll until a poll finds nothing.
	s.catchUp.Store(true)
	return s, nil
}

// Slot returns the stream's name, the key of its lease and position rows.
func (s *Source) Slot() string { return s.lease.slot }

// Close closes the source's binary log reader and the store.
func (s *Source) Close() error {
	s.reader.Close()
	return s.Store.Close()
}

// Features declares the MySQL store's capabilities, with the source as
// the Listener: a relay is woken by the binary log stream (and the
// safety-net poll).
func (s *Source) Features() store.Features {
	f := s.Store.Features()
	f.Listener = s
	return f
}

// Streaming reports whether this source holds the lease and reads the
// binary log now.
func (s *Source) Streaming() bool { return s.streaming.Load() }

// Streamed counts the outbox rows this source read from the binary log.
func (s *Source) Streamed() int64 { return s.streamed.Load() }

// ClaimedByStream and ClaimedByPoll count the events this source claimed
// by id from the stream and by the ordinary claim.
func (s *Source) ClaimedByStream() int64 { return s.byStream.Load() }

// ClaimedByPoll: see ClaimedByStream.
func (s *Source) ClaimedByPoll() int64 { return s.byPoll.Load() }

// PositionsPurged counts the times the saved position was no longer in
// the server's binary log, and the source fell back to polling the table.
func (s *Source) PositionsPurged() int64 { return s.purged.Load() }

// LagBytes returns how much binary log the server wrote after the saved
// position as last read (every StatusInterval), and whether it was read.
func (s *Source) LagBytes() (int64, bool) { return s.lagBytes.Load(), s.lagKnown.Load() }

// SavedPosition returns the position this relay last saved or loaded.
func (s *Source) SavedPosition() Position {
	if p := s.saved.Load(); p != nil {
		return *p
	}
	return Position{}
}

// Claim claims streamed events by id when there are any, else runs the
// ordinary claim when PollInterval has passed since the last one or the
// source catches up; else it returns an empty claim.
func (s *Source) Claim(ctx context.Context, req store.ClaimRequest) (*store.Claim, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	c, took, err := s.track.ClaimStreamed(ctx, req, s.Store.ClaimIDs, s.wakeRelay)
	if took {
		select { // the queue has room again
		case s.space <- struct{}{}:
		default:
		}
	}
	if err != nil {
		return nil, err
	}
	if c != nil {
		s.byStream.Add(int64(len(c.Events)))
		if len(c.Events) > 0 {
			return c, nil
		}
	}
	catchingUp := s.catchUp.Load()
	s.pollMu.Lock()
	due := catchingUp || time.Since(s.lastPoll) >= s.cfg.PollInterval
	if due {
		s.lastPoll = time.Now()
	}
	s.pollMu.Unlock()
	if !due {
		return &store.Claim{}, nil
	}
	c, err = s.Store.Claim(ctx, req)
	if err != nil {
		return nil, err
	}
	if len(c.Events) == 0 {
		if catchingUp && s.catchUp.CompareAndSwap(true, false) {
			s.log.Info("caught up with the table: new events come from the binary log")
		}
		return c, nil
	}
	got := make([]int64, len(c.Events))
	for i, ev := range c.Events {
		got[i] = ev.ID
	}
	s.track.ClaimedByPoll(c.Token, time.Now().Add(req.Lease), got)
	s.byPoll.Add(int64(len(got)))
	return c, nil
}

// Complete records outcomes through the MySQL store and then lets the
// saved position move past the events of the claim: each is now final or
// back in the table's hands (the retry path).
func (s *Source) Complete(ctx context.Context, req store.CompleteRequest) (store.CompleteResult, error) {
	res, err := s.Store.Complete(ctx, req)
	if err == nil {
		s.track.Completed(req.Token)
	}
	return res, err
}

// wakeRelay wakes the relay through the func Listen was given.
func (s *Source) wakeRelay() {
	if w := s.wake.Load(); w != nil {
		(*w)()
	}
}
