package cdc

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/postgres"
)

// Config configures a Source. Zero values mean the documented defaults.
type Config struct {
	// Slot is the logical replication slot; default "<table>_slot".
	Slot string
	// Publication is the publication of the outbox table's inserts;
	// default "<table>_publication".
	Publication string
	// PollInterval is the safety net: how often the ordinary claim runs to
	// pick up what the stream handed back (retries, events held behind an
	// earlier one of their aggregate) and anything committed while no
	// relay streamed. Default 5s.
	PollInterval time.Duration
	// Lease is how long the stream lease lasts: a standby relay takes over
	// within about this long after the streaming one dies. Default 15s.
	Lease time.Duration
	// HolderID names this relay in the lease; default a fresh relay id.
	HolderID string
	// StatusInterval is how often the relay reports its confirmed
	// position to PostgreSQL (and reads the slot's lag). Default 1s.
	StatusInterval time.Duration
	// MaxQueued bounds the streamed events waiting to be claimed; the
	// stream stops reading while it is reached. Default 20000.
	MaxQueued int
	// Logger receives the source's logs. Default slog.Default().
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultPollInterval   = 5 * time.Second
	DefaultLease          = 15 * time.Second
	DefaultStatusInterval = time.Second
	DefaultMaxQueued      = 20000
)

// Source is a store.Store for the relay that learns of new events from the
// write-ahead log. Its Listen streams the outbox table's committed inserts
// from a logical slot; its Claim claims the streamed rows by id (in commit
// order, under Claim's ordering rules), and runs the ordinary claim once
// every PollInterval as the safety net. Everything else (Complete, the
// sweeper, the operator commands) is the PostgreSQL store's.
type Source struct {
	*postgres.Store
	cfg   Config
	log   *slog.Logger
	lease streamLease

	track    *tracker
	space    chan struct{} // signalled when a claim took from the queue
	pollMu   sync.Mutex
	lastPoll time.Time

	wake      atomic.Pointer[func()] // the relay's wake-up, from Listen
	streaming atomic.Bool
	lagBytes  atomic.Int64
	lagKnown  atomic.Bool
	streamed  atomic.Int64
	byStream  atomic.Int64
	byPoll    atomic.Int64
	recreate  atomic.Bool  // drop the slot before the next stream: it cannot be decoded
	recreated atomic.Int64 // slots dropped and created again for that
}

var (
	_ store.Store    = (*Source)(nil)
	_ store.Listener = (*Source)(nil)
)

// New checks the database (see Check), creates the publication and the
// slot when they are missing, and returns the source. The store must be
// migrated (the lease table is part of the schema).
func New(ctx context.Context, st *postgres.Store, cfg Config) (*Source, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: cdc.New needs a *postgres.Store", outbox.ErrInvalidConfig)
	}
	table := st.Table()
	if cfg.Slot == "" {
		cfg.Slot = table + "_slot"
	}
	if cfg.Publication == "" {
		cfg.Publication = table + "_publication"
	}
	if err := validateName("slot", cfg.Slot); err != nil {
		return nil, err
	}
	if err := validateName("publication", cfg.Publication); err != nil {
		return nil, err
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
		return nil, fmt.Errorf("%w: cdc poll interval %s is too short: use at least 10ms", outbox.ErrInvalidConfig, cfg.PollInterval)
	case cfg.Lease < 300*time.Millisecond:
		return nil, fmt.Errorf("%w: cdc lease %s is too short: use at least 300ms", outbox.ErrInvalidConfig, cfg.Lease)
	case cfg.StatusInterval < 10*time.Millisecond || cfg.StatusInterval > time.Minute:
		return nil, fmt.Errorf("%w: cdc status interval %s is out of range: use 10ms to 1m", outbox.ErrInvalidConfig, cfg.StatusInterval)
	case cfg.MaxQueued < 1:
		return nil, fmt.Errorf("%w: cdc queue bound %d must be positive", outbox.ErrInvalidConfig, cfg.MaxQueued)
	}
	if cfg.HolderID == "" {
		cfg.HolderID = relay.NewRelayID()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	pool := st.Pool()
	if err := Check(ctx, pool, table); err != nil {
		return nil, err
	}
	if err := ensurePublication(ctx, pool, cfg.Publication, table); err != nil {
		return nil, err
	}
	if err := ensureSlot(ctx, pool, cfg.Slot); err != nil {
		return nil, err
	}
	s := &Source{
		Store: st,
		cfg:   cfg,
		log:   cfg.Logger.With("slot", cfg.Slot),
		lease: streamLease{
			pool: pool, table: quoteIdent(table + "_cdc_lease"),
			slot: cfg.Slot, holder: cfg.HolderID, length: cfg.Lease,
		},
		track: newTracker(0),
		space: make(chan struct{}, 1),
		// The first safety-net poll comes one interval after the start:
		// what was committed while no relay streamed is still in the slot.
		lastPoll: time.Now(),
	}
	return s, nil
}

// Slot returns the slot's name.
func (s *Source) Slot() string { return s.cfg.Slot }

// Features declares the PostgreSQL store's capabilities, with the source
// as the Listener: a relay is woken by the replication stream (and the
// safety-net poll) instead of LISTEN/NOTIFY.
func (s *Source) Features() store.Features {
	f := s.Store.Features()
	f.Listener = s
	return f
}

// Publication returns the publication's name.
func (s *Source) Publication() string { return s.cfg.Publication }

// Streaming reports whether this source holds the lease and streams now.
func (s *Source) Streaming() bool { return s.streaming.Load() }

// Streamed counts the outbox rows this source received from the stream.
func (s *Source) Streamed() int64 { return s.streamed.Load() }

// ClaimedByStream and ClaimedByPoll count the events this source claimed
// by id from the stream and by the safety-net poll.
func (s *Source) ClaimedByStream() int64 { return s.byStream.Load() }

// ClaimedByPoll: see ClaimedByStream.
func (s *Source) ClaimedByPoll() int64 { return s.byPoll.Load() }

// SlotRecreations returns how many times the source dropped its slot and
// created it again at the current position because PostgreSQL could not
// decode the slot's WAL (the same decoding error at the same position,
// several attempts in a row).
func (s *Source) SlotRecreations() int64 { return s.recreated.Load() }

// SlotLagBytes returns the slot's lag as last read (every StatusInterval
// while streaming or standing by), and whether it was read at all.
func (s *Source) SlotLagBytes() (int64, bool) { return s.lagBytes.Load(), s.lagKnown.Load() }

// ConfirmedLSN returns the position this source last may confirm.
func (s *Source) ConfirmedLSN() pglogrepl.LSN {
	lsn, _ := s.track.Position()
	return lsn
}

// Claim claims streamed events by id when there are any, else runs the
// ordinary claim when PollInterval has passed since the last one; else it
// returns an empty claim.
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
	s.pollMu.Lock()
	due := time.Since(s.lastPoll) >= s.cfg.PollInterval
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
	if len(c.Events) > 0 {
		got := make([]int64, len(c.Events))
		for i, ev := range c.Events {
			got[i] = ev.ID
		}
		s.track.ClaimedByPoll(c.Token, time.Now().Add(req.Lease), got)
		s.byPoll.Add(int64(len(got)))
	}
	return c, nil
}

// wakeRelay wakes the relay through the func Listen was given.
func (s *Source) wakeRelay() {
	if w := s.wake.Load(); w != nil {
		(*w)()
	}
}

// Complete records outcomes through the PostgreSQL store and then lets the
// confirmed position move past the events of the claim: each is now final
// or back in the table's hands (the retry path).
func (s *Source) Complete(ctx context.Context, req store.CompleteRequest) (store.CompleteResult, error) {
	res, err := s.Store.Complete(ctx, req)
	if err == nil {
		s.track.Completed(req.Token)
	}
	return res, err
}
