package relay

import (
	"context"
	"errors"
	"time"

	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/internal/textlimit"
	"github.com/txoutbox/outbox/store"
)

// keyRetryIn is how long an event whose payload this relay could not open
// for a reason that may pass (no key-encryption key given, one that does
// not unwrap its data key, the keys table out of reach) waits before a
// relay tries again. No retry is counted.
const keyRetryIn = 30 * time.Second

// keyStore returns where the relay reads data keys: Config.Keys, or the
// Store when it keeps them (every store.Store does).
func (c Config) keyStore() encrypt.KeyStore {
	if c.Keys != nil {
		return c.Keys
	}
	ks, _ := c.Store.(encrypt.KeyStore)
	return ks
}

// openPayload returns what the sink receives for ev: its payload, opened
// when it is sealed. The batch reads each data key once.
func (b *batch) openPayload(ctx context.Context, ev *store.Claimed) ([]byte, error) {
	if !encrypt.IsSealed(ev.Payload) {
		return ev.Payload, nil
	}
	r := b.relay
	if r.cfg.Encryption == nil {
		return nil, errNoKeyring
	}
	if b.keys == nil {
		ks := r.cfg.keyStore()
		if ks == nil {
			return nil, errNoKeyStore
		}
		b.keys = r.cfg.Encryption.Batch(ks)
	}
	return b.keys.Open(ctx, ev.EventID.String(), ev.Payload)
}

// pendingSealer is a store that can seal the plain payloads of pending
// rows (every store.Store; a CDC source may not).
type pendingSealer interface {
	SealPending(ctx context.Context, rows []store.SealedPayload) (int64, error)
}

// sealLater notes ev, whose payload a producer wrote in plain, to be
// sealed in its row before the batch is sent (sealPlain): with
// encryption on, a plain payload is stored sealed from the relay's first
// claim on, and so is its dead letter. Its subject is its aggregate.
func (b *batch) sealLater(ctx context.Context, ev *store.Claimed) {
	r := b.relay
	if r.cfg.Encryption == nil || encrypt.IsSealed(ev.Payload) {
		return
	}
	if _, ok := r.cfg.Store.(pendingSealer); !ok {
		return
	}
	if b.keys == nil {
		ks := r.cfg.keyStore()
		if ks == nil {
			return
		}
		b.keys = r.cfg.Encryption.Batch(ks)
	}
	sealed, err := b.keys.Seal(ctx, ev.EventID.String(), encrypt.DefaultSubject(ev.AggregateType, ev.AggregateID), ev.Payload)
	if err != nil {
		r.log.Warn("a plain payload could not be sealed; it is sent, and stays in plain in its row", "event_id", ev.EventID.String(), "err", err)
		return
	}
	b.toSeal = append(b.toSeal, store.SealedPayload{ID: ev.ID, EventID: ev.EventID, Payload: sealed})
}

// sealPlain stores the envelopes sealLater made in their rows.
func (b *batch) sealPlain(ctx context.Context) {
	if len(b.toSeal) == 0 {
		return
	}
	r := b.relay
	if _, err := r.cfg.Store.(pendingSealer).SealPending(ctx, b.toSeal); err != nil {
		r.log.Warn("plain payloads could not be sealed in their rows; they are sent, and stay in plain", "events", len(b.toSeal), "err", err)
	}
	b.toSeal = nil
}

var (
	errNoKeyring  = errors.New("the payload is sealed and this relay has no key-encryption key (--encryption-key-file or --encryption-key-env; relay.Config.Encryption)")
	errNoKeyStore = errors.New("the payload is sealed and the relay's store keeps no data keys (relay.Config.Keys)")
)

// unreadable decides the outcome of an event whose payload did not open:
// it is never sent. A payload that can never be read (its subject's key
// shredded, or the envelope not for this event) ends FAILED, with a dead
// letter; any other reason gives it back unsent, no retry counted, for a
// relay that holds the key. Either way the aggregate's later events wait
// behind it.
func (b *batch) unreadable(ev *store.Claimed, o *store.Outcome, err error, heldHere map[string]aggregateState) {
	r := b.relay
	now := r.now()
	o.StartedAt, o.FinishedAt = b.dbTime(now), b.dbTime(now)
	o.TraceID = store.TraceIDOf(ev.Headers)
	if errors.Is(err, encrypt.ErrShredded) || errors.Is(err, encrypt.ErrUnreadable) {
		o.Kind, o.Attempted = store.Failed, true
		o.Error = textlimit.StorableText("payload unreadable, never sent: "+err.Error(), maxSinkErrorRunes)
		heldHere[ev.OrderingKey()] = aggregateState{stopped: true, block: r.failedBlocks()}
		return
	}
	o.Kind, o.RetryIn = store.Released, keyRetryIn
	o.Error = textlimit.StorableText("payload not opened, not sent: "+err.Error(), maxSinkErrorRunes)
	heldHere[ev.OrderingKey()] = aggregateState{stopped: true, retryIn: keyRetryIn}
	r.log.Error("a sealed payload could not be opened; the event waits for a relay that can",
		"event_id", ev.EventID.String(), "err", err)
}
