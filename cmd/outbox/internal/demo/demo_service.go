package demo

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	sqlitedrv "modernc.org/sqlite"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store/postgres"
)

// demoDB is the demo's business database: the outbox's own database, seen
// through database/sql so that one code path writes the payments table and
// enqueues in the same *sql.Tx on every backend.
type demoDB struct {
	db     *sql.DB
	writer outbox.Writer[*sql.Tx]
	dollar bool // PostgreSQL placeholders ($1) instead of ?
	close  func()
}

// openDemoDB returns the business side of b. Backends that keep a *sql.DB
// (SQLite, MySQL) are used through it; PostgreSQL through a *sql.DB on the
// store's pool and its *sql.Tx writer.
func openDemoDB(b *Backend) (*demoDB, error) {
	switch s := b.Store.(type) {
	case *postgres.Store:
		db := stdlib.OpenDBFromPool(s.Pool())
		return &demoDB{db: db, writer: s.SQL(), dollar: true, close: func() { db.Close() }}, nil
	case interface {
		DB() *sql.DB
		outbox.Writer[*sql.Tx]
	}:
		return &demoDB{db: s.DB(), writer: s, close: func() {}}, nil
	}
	return nil, fmt.Errorf("the demo cannot open a business transaction on the %s backend: it needs a store with DB() *sql.DB that enqueues in a *sql.Tx", b.Kind)
}

// q rewrites ? placeholders for the database.
func (d *demoDB) q(query string) string {
	if !d.dollar {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// createPayments creates the demo's business table (plain SQL that
// SQLite, PostgreSQL and MySQL all accept). name is a validated identifier.
func (d *demoDB) createPayments(ctx context.Context, name string) error {
	_, err := d.db.ExecContext(ctx, `CREATE TABLE `+name+` (
    tx_no       VARCHAR(32) PRIMARY KEY,
    merchant_id VARCHAR(32) NOT NULL,
    amount      BIGINT      NOT NULL,
    status      VARCHAR(20) NOT NULL,
    created_at  TIMESTAMP   NOT NULL DEFAULT CURRENT_TIMESTAMP
)`)
	if err != nil {
		return fmt.Errorf("create the demo's business table %s: %w", name, err)
	}
	return nil
}

func (d *demoDB) dropTable(ctx context.Context, name string) error {
	_, err := d.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+name)
	return err
}

// The merchants of the demo. Payments over merchantLimit break the
// business rule and roll back.
var goodMerchants = []string{"M-0001", "M-0002", "M-0003", "M-0004", "M-0005", "M-0006", "M-0007", "M-0008"}

const (
	poisonMerchant = "M-0666"
	merchantLimit  = 500_000 // KRW, per payment
	cancelShare    = 0.15    // payments followed by a CancelRequested
)

// sentEvent is an event the service wrote.
type sentEvent struct {
	ID            outbox.EventID
	AggregateType string
	AggregateID   string
	EventType     string
	At            time.Time
	Poison        bool
}

// pendingCancel is a CancelRequested the customer will send later.
type pendingCancel struct {
	txNo     string
	merchant string
	due      time.Time
	deadline time.Time // the QR code's end
	poison   bool
}

// paymentService is the demo's payment service. Each "QR confirmed"
// request writes a payment row and an ApprovalRequested event in one
// transaction, with the QR lifetime as TTL.
type paymentService struct {
	db            *demoDB
	payments      string // table name
	ttl           time.Duration
	rate          float64
	merchantEvery time.Duration
	nudge         func()
	log           func(tag, format string, args ...any)

	poisonToSend atomic.Int32

	mu          sync.Mutex
	rnd         *rand.Rand
	requests    int
	committed   []sentEvent
	rolledBack  []outbox.EventID
	ambiguous   []sentEvent // commit returned an error: outcome unknown until read back
	errors      int
	cancels     []pendingCancel
	merchantSeq map[string]int
	lastSettle  time.Time
	routesShown bool

	stop chan struct{}
	done chan struct{}
}

// start runs the service until stopService. Transactions in flight finish
// with ctx, so a stop never leaves a commit ambiguous.
func (s *paymentService) start(ctx context.Context) {
	s.stop = make(chan struct{})
	s.done = make(chan struct{})
	s.merchantSeq = map[string]int{}
	go func() {
		defer close(s.done)
		t := time.NewTicker(time.Duration(float64(time.Second) / s.rate))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.stop:
				return
			case <-t.C:
			}
			s.confirmQR(ctx)
			s.sendDueCancels(ctx)
			s.maybeSettle(ctx)
		}
	}()
}

func (s *paymentService) stopService() {
	close(s.stop)
	<-s.done
}

// injectPoison makes the next n payments go to the poison merchant.
func (s *paymentService) injectPoison(n int) { s.poisonToSend.Add(int32(n)) }

// counts returns the requests handled and events committed and rolled back.
func (s *paymentService) counts() (requests, committed, rolledBack int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests, len(s.committed), len(s.rolledBack)
}

// committedSince returns the events committed from position i on, and the
// new position.
func (s *paymentService) committedSince(i int) ([]sentEvent, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sentEvent(nil), s.committed[i:]...), len(s.committed)
}

// poisonEvents returns the committed events of the poison merchant.
func (s *paymentService) poisonEvents() []sentEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sentEvent
	for _, e := range s.committed {
		if e.Poison {
			out = append(out, e)
		}
	}
	return out
}

type paymentPayload struct {
	TxNo       string `json:"tx_no"`
	MerchantID string `json:"merchant_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
	Seq        int    `json:"seq"`
	Reason     string `json:"reason,omitempty"`
}

// confirmQR handles one "QR confirmed" request: INSERT payment + Enqueue
// ApprovalRequested in one transaction; the merchant's limit is checked
// after the writes, as a trigger would, and a payment over it rolls back.
func (s *paymentService) confirmQR(ctx context.Context) {
	s.mu.Lock()
	s.requests++
	n := s.requests
	merchant := goodMerchants[s.rnd.IntN(len(goodMerchants))]
	amount := int64(1000 * (1 + s.rnd.IntN(560))) // ~10% over the limit
	s.mu.Unlock()
	poison := false
	if s.poisonToSend.Load() > 0 {
		s.poisonToSend.Add(-1)
		merchant, poison = poisonMerchant, true
		amount = min(amount, merchantLimit)
	}
	txNo := fmt.Sprintf("T%06d", n)
	body, _ := json.Marshal(paymentPayload{TxNo: txNo, MerchantID: merchant, Amount: amount, Currency: "KRW", Seq: 0})
	ev := outbox.Event{
		AggregateType: "payment", AggregateID: txNo, EventType: "ApprovalRequested",
		Payload: body, TTL: s.ttl, Headers: map[string]string{"merchant-id": merchant},
		// If the QR code runs out before the gateway approved it, the
		// merchant learns of it: the store enqueues ApprovalExpired in the
		// transaction that marks this event EXPIRED.
		OnExpired: &outbox.Compensation{EventType: "ApprovalExpired"},
	}
	now := time.Now()
	id, committed, err := s.inTx(ctx, func(tx *sql.Tx) (bool, error) {
		if _, err := tx.ExecContext(ctx, s.db.q(`INSERT INTO `+s.payments+` (tx_no, merchant_id, amount, status) VALUES (?, ?, ?, ?)`),
			txNo, merchant, amount, "APPROVAL_REQUESTED"); err != nil {
			return false, fmt.Errorf("insert payment: %w", err)
		}
		return amount <= merchantLimit, nil // the business rule
	}, ev)
	s.record(id, committed, err, sentEvent{AggregateType: "payment", AggregateID: txNo, EventType: ev.EventType, At: now, Poison: poison})
	if !committed || err != nil {
		return
	}
	s.mu.Lock()
	switch {
	case poison:
		// The customer of an invalid merchant gives up and cancels.
		s.cancels = append(s.cancels, pendingCancel{txNo: txNo, merchant: merchant, due: now.Add(s.ttl / 20), deadline: now.Add(s.ttl), poison: true})
	case s.rnd.Float64() < cancelShare:
		due := now.Add(time.Duration((0.05 + 0.4*s.rnd.Float64()) * float64(s.ttl)))
		s.cancels = append(s.cancels, pendingCancel{txNo: txNo, merchant: merchant, due: due, deadline: now.Add(s.ttl)})
	}
	s.mu.Unlock()
}

// sendDueCancels writes the CancelRequested events that are due: UPDATE
// payment + Enqueue in one transaction. A cancel lives only as long as the
// QR code: its TTL is what is left of it.
func (s *paymentService) sendDueCancels(ctx context.Context) {
	now := time.Now()
	s.mu.Lock()
	var due []pendingCancel
	kept := s.cancels[:0]
	for _, c := range s.cancels {
		if c.due.After(now) {
			kept = append(kept, c)
		} else {
			due = append(due, c)
		}
	}
	s.cancels = kept
	s.mu.Unlock()
	for _, c := range due {
		left := c.deadline.Sub(time.Now())
		if left < 50*time.Millisecond {
			continue // the QR code is gone: nothing to cancel any more
		}
		body, _ := json.Marshal(paymentPayload{TxNo: c.txNo, MerchantID: c.merchant, Currency: "KRW", Seq: 1, Reason: "customer cancelled"})
		ev := outbox.Event{
			AggregateType: "payment", AggregateID: c.txNo, EventType: "CancelRequested",
			Payload: body, TTL: left, Headers: map[string]string{"merchant-id": c.merchant},
		}
		at := time.Now()
		id, committed, err := s.inTx(ctx, func(tx *sql.Tx) (bool, error) {
			if _, err := tx.ExecContext(ctx, s.db.q(`UPDATE `+s.payments+` SET status = ? WHERE tx_no = ?`), "CANCEL_REQUESTED", c.txNo); err != nil {
				return false, fmt.Errorf("update payment: %w", err)
			}
			return true, nil
		}, ev)
		s.record(id, committed, err, sentEvent{AggregateType: "payment", AggregateID: c.txNo, EventType: ev.EventType, At: at, Poison: c.poison})
	}
}

// maybeSettle now and then writes a merchant event (SettlementRequested
// with the merchant's running totals, read in the same transaction): the
// destinations file routes it to Kafka, topic merchant.events.
func (s *paymentService) maybeSettle(ctx context.Context) {
	now := time.Now()
	s.mu.Lock()
	if now.Sub(s.lastSettle) < s.merchantEvery {
		s.mu.Unlock()
		return
	}
	s.lastSettle = now
	merchant := goodMerchants[s.rnd.IntN(len(goodMerchants))]
	seq := s.merchantSeq[merchant]
	s.mu.Unlock()
	var count, total int64
	ev := outbox.Event{AggregateType: "merchant", AggregateID: merchant, EventType: "SettlementRequested"}
	id, committed, err := s.inTxBuild(ctx, func(tx *sql.Tx) (*outbox.Event, error) {
		if err := tx.QueryRowContext(ctx, s.db.q(`SELECT count(*), COALESCE(SUM(amount), 0) FROM `+s.payments+` WHERE merchant_id = ?`), merchant).Scan(&count, &total); err != nil {
			return nil, fmt.Errorf("read the merchant's totals: %w", err)
		}
		ev.Payload, _ = json.Marshal(map[string]any{"merchant_id": merchant, "seq": seq, "payments": count, "total": total, "currency": "KRW"})
		return &ev, nil
	})
	if committed && err == nil {
		s.mu.Lock()
		s.merchantSeq[merchant] = seq + 1
		first := !s.routesShown
		s.routesShown = true
		s.mu.Unlock()
		if first {
			s.log("routing", "merchant/%s SettlementRequested -> kafka (merchant.events); payment ApprovalRequested -> gateway and kafka (payment.events); other payment events -> kafka", merchant)
		}
	}
	s.record(id, committed, err, sentEvent{AggregateType: "merchant", AggregateID: merchant, EventType: ev.EventType, At: now})
}

// inTx runs write and enqueues ev in one transaction; write returns false
// to roll back (a business rule failed after the writes).
func (s *paymentService) inTx(ctx context.Context, write func(*sql.Tx) (bool, error), ev outbox.Event) (outbox.EventID, bool, error) {
	var keep bool
	return s.inTxBuild(ctx, func(tx *sql.Tx) (*outbox.Event, error) {
		var err error
		keep, err = write(tx)
		if err != nil {
			return nil, err
		}
		if !keep {
			// Enqueue first, then roll back: the event was written in the
			// transaction and must vanish with it.
			return &ev, errRollback
		}
		return &ev, nil
	})
}

var errRollback = errors.New("business rule failed: over the merchant's limit")

// inTxBuild begins a transaction, lets build write the business rows and
// return the event, enqueues it and commits, or rolls back when build
// returns errRollback. It returns the event id, whether the transaction
// committed, and an error for anything unexpected.
func (s *paymentService) inTxBuild(ctx context.Context, build func(*sql.Tx) (*outbox.Event, error)) (outbox.EventID, bool, error) {
	tx, err := s.db.db.BeginTx(ctx, nil)
	if err != nil {
		return outbox.EventID{}, false, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	ev, berr := build(tx)
	if berr != nil && !errors.Is(berr, errRollback) {
		return outbox.EventID{}, false, berr
	}
	ids, err := outbox.Enqueue(ctx, s.db.writer, tx, *ev)
	if err != nil {
		return outbox.EventID{}, false, err // "enqueue: ..." from the store, "outbox: ..." from the checks
	}
	if errors.Is(berr, errRollback) {
		if err := tx.Rollback(); err != nil {
			return ids[0], false, fmt.Errorf("rollback: %w", err)
		}
		return ids[0], false, nil
	}
	if err := tx.Commit(); err != nil {
		return ids[0], true, &ambiguousCommit{err}
	}
	if s.nudge != nil {
		s.nudge()
	}
	return ids[0], true, nil
}

// ambiguousCommit is a commit that returned an error: it may or may not
// have happened. The summary reads the outbox to decide.
type ambiguousCommit struct{ err error }

func (e *ambiguousCommit) Error() string { return "commit: " + e.err.Error() }

// record files one transaction's outcome.
func (s *paymentService) record(id outbox.EventID, committed bool, err error, e sentEvent) {
	e.ID = id
	s.mu.Lock()
	var amb *ambiguousCommit
	switch {
	case errors.As(err, &amb):
		s.ambiguous = append(s.ambiguous, e)
	case err != nil:
	case committed:
		s.committed = append(s.committed, e)
	case !id.IsZero():
		s.rolledBack = append(s.rolledBack, id)
	}
	if err != nil {
		s.errors++
	}
	n := s.errors
	s.mu.Unlock()
	if err != nil && n <= 3 {
		s.log("service", "%s/%s %s: transaction failed: %v", e.AggregateType, e.AggregateID, e.EventType, err)
	}
}

// enqueueDirect writes evs in one transaction of their own (no business
// row: the incidents' extra load) and files them as committed.
func (s *paymentService) enqueueDirect(ctx context.Context, evs ...outbox.Event) ([]outbox.EventID, error) {
	tx, err := s.db.db.BeginTx(ctx, nil)
	// SQLite's BEGIN IMMEDIATE gives up after its busy timeout (10 s) when
	// the relays hold the write lock that long, as on a loaded machine:
	// nothing happened, so it is tried again, as an application would.
	for try := 1; err != nil && sqliteBusy(err) && try < 5; try++ {
		tx, err = s.db.db.BeginTx(ctx, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	ids, err := outbox.Enqueue(ctx, s.db.writer, tx, evs...)
	if err != nil {
		return nil, err // "enqueue: ..." from the store, "outbox: ..." from the checks
	}
	if err := tx.Commit(); err != nil {
		// It may have happened: the summary reads the outbox to decide.
		s.mu.Lock()
		for i, ev := range evs {
			s.ambiguous = append(s.ambiguous, sentEvent{ID: ids[i], AggregateType: ev.AggregateType, AggregateID: ev.AggregateID, EventType: ev.EventType, At: time.Now()})
		}
		s.mu.Unlock()
		return nil, fmt.Errorf("commit: %w", err)
	}
	now := time.Now()
	s.mu.Lock()
	for i, ev := range evs {
		s.committed = append(s.committed, sentEvent{ID: ids[i], AggregateType: ev.AggregateType, AggregateID: ev.AggregateID, EventType: ev.EventType, At: now})
	}
	s.mu.Unlock()
	if s.nudge != nil {
		s.nudge()
	}
	return ids, nil
}

// sqliteBusy reports whether err is SQLite's SQLITE_BUSY.
func sqliteBusy(err error) bool {
	var se *sqlitedrv.Error
	return errors.As(err, &se) && se.Code()&0xff == 5
}
