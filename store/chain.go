package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// The audit chain makes the audit trail tamper-evident. Each record of the
// trail (an attempts row, a route change, an audit note) is chained when it
// is inserted, in the inserting transaction, by a trigger of the schema:
// the trigger writes one row of <outbox>_chain holding the record's kind
// and key (ref), the SHA-256 of the record's content (digest), and the
// link hash over the previous link's hash and this link. The head row
// (<outbox>_chain_head) holds the last link, and its row lock orders the
// writers.
//
// A verifier (package audit) walks the links, recomputes every hash, and
// recomputes each record's digest from the row as it is now: a record
// changed or deleted by SQL after it was chained no longer matches its
// link.

// ChainKind names the kind of a chained record.
type ChainKind string

// The kinds of chained records.
const (
	// ChainAttempt is a row of the attempts table: every attempt that is
	// not a delivery recorded on the event, and every operator action on an
	// event. Ref: "<event id>/<claim token>/<outcome>".
	ChainAttempt ChainKind = "attempt"
	// ChainRoute is a row of the route log: a breaker change, by a relay or
	// by hand. Ref: the row's id.
	ChainRoute ChainKind = "route"
	// ChainEvent is a row of the history: a finished event as it moved
	// out of the hot table, with its delivery. Ref: the event id.
	ChainEvent ChainKind = "event"
	// ChainNote is a row of the audit log: a retention run, an anchor of
	// the chain, another note of an operator. Ref: the row's id.
	ChainNote ChainKind = "note"
)

// ChainKinds lists the kinds a verifier checks, in a fixed order.
var ChainKinds = []ChainKind{ChainAttempt, ChainRoute, ChainEvent, ChainNote}

// GenesisHash is the hash before the first link: 64 zeros.
var GenesisHash = strings.Repeat("0", 64)

// ChainLink is one row of the chain.
type ChainLink struct {
	Seq    int64
	Kind   ChainKind
	Ref    string
	Digest string
	Hash   string
	// ChainedMS is the database clock, in Unix milliseconds, when the
	// record was chained.
	ChainedMS int64
	// RecordMS dates the record for retention, in Unix milliseconds: an
	// event of the history by when it finished, the other kinds by
	// ChainedMS.
	RecordMS int64
}

// LinkHash returns the hash a link must carry after the link whose hash is
// prev: the hex SHA-256 of "prev:seq:kind:ref:digest:chained_ms:record_ms".
// The schema's triggers compute the same.
func LinkHash(prev string, l ChainLink) string {
	sum := sha256.Sum256([]byte(prev + ":" + strconv.FormatInt(l.Seq, 10) + ":" + string(l.Kind) + ":" +
		l.Ref + ":" + l.Digest + ":" + strconv.FormatInt(l.ChainedMS, 10) + ":" + strconv.FormatInt(l.RecordMS, 10)))
	return hex.EncodeToString(sum[:])
}

// ChainHead is the chain's end: its last link, and when it began.
type ChainHead struct {
	// Seq and Hash are the last link's (0 and GenesisHash before the
	// first).
	Seq  int64
	Hash string
	// Genesis is when the chain began (the migration that made it):
	// records written before it are not chained.
	Genesis time.Time
}

// AuditNote is a row of the audit log: a record of the trail that is not
// an attempt or a route change.
type AuditNote struct {
	ID    int64
	At    time.Time
	Kind  string
	Actor string
	// Detail is the note's content, JSON for the kinds outbox writes.
	Detail string
}

// The kinds of audit notes outbox writes.
const (
	// NoteAnchor is a signed anchor of the chain's head (package audit).
	NoteAnchor = "anchor"
	// NoteRetention records records removed on purpose: the verifier does
	// not count a record chained before its cutoff as deleted.
	NoteRetention = "retention"
)

// Unchained counts the records of one kind written since the chain began
// that no link names (written while the chain's trigger was disabled), with
// the refs of a few of them.
type Unchained struct {
	Kind  ChainKind
	Count int64
	Refs  []string
	// Before counts the records written before the chain began, which no
	// link can name.
	Before int64
}

// AuditChain reads the audit chain of an outbox and writes its notes.
type AuditChain interface {
	// Head returns the last link and when the chain began.
	Head(ctx context.Context) (ChainHead, error)
	// Links returns up to limit links with seq > afterSeq, in seq order.
	Links(ctx context.Context, afterSeq int64, limit int) ([]ChainLink, error)
	// Digests returns the digest of each record of kind whose ref is
	// given, computed from the row as it is now, by ref; a ref without a
	// row is absent from the map. refs holds at most 200.
	Digests(ctx context.Context, kind ChainKind, refs []string) (map[string]string, error)
	// Unchained counts the records of kind that no link names.
	Unchained(ctx context.Context, kind ChainKind) (Unchained, error)
	// AddNote writes an audit note (At is the database clock); the
	// schema chains it. It returns the note's id.
	AddNote(ctx context.Context, n AuditNote) (int64, error)
	// Notes returns the notes of a kind, oldest first.
	Notes(ctx context.Context, kind string) ([]AuditNote, error)
	// Close releases what the chain opened of its own.
	Close() error
}

// Retention is the detail of a retention note: records chained before
// the cutoff may have been removed on purpose. The cutoff is CutoffMS when
// set, else the note's time less OlderThanMS (both on the database clock).
type Retention struct {
	CutoffMS    int64  `json:"cutoff_ms,omitempty"`
	OlderThanMS int64  `json:"older_than_ms,omitempty"`
	Deleted     int64  `json:"deleted"`
	What        string `json:"what"`
}

// Cutoff returns the note's cutoff in Unix milliseconds.
func (r Retention) Cutoff(n AuditNote) int64 {
	if r.CutoffMS > 0 {
		return r.CutoffMS
	}
	return n.At.UnixMilli() - r.OlderThanMS
}

// RecordNote writes a note of kind to the audit log of s, when s keeps one
// (every backend of this module does): detail is marshalled as JSON, and
// the schema chains the note. actor names who acted ("relay:<id>",
// "operator:<name>").
func RecordNote(ctx context.Context, s any, kind, actor string, detail any) error {
	keeper, ok := s.(interface{ AuditChain() AuditChain })
	if !ok {
		return nil
	}
	text, err := json.Marshal(detail)
	if err != nil {
		return err
	}
	c := keeper.AuditChain()
	defer c.Close()
	_, err = c.AddNote(ctx, AuditNote{Kind: kind, Actor: actor, Detail: string(text)})
	return err
}

// RecordRetention writes a retention note to the audit log of s after a
// deletion of the final events older than olderThan with their attempts
// (nothing when none was deleted): the audit chain's verifier then counts
// the records it removed as retained rather than deleted by hand.
func RecordRetention(ctx context.Context, s any, olderThan time.Duration, deleted int64, actor, what string) error {
	if deleted == 0 {
		return nil
	}
	return RecordNote(ctx, s, NoteRetention, actor, Retention{OlderThanMS: olderThan.Milliseconds(), Deleted: deleted, What: what})
}

// RecordHistoryDrop writes a retention note to the audit log of s after a
// drop of whole months of history: the audit chain's verifier then counts
// the events and attempts of those months as retained. actor names who
// dropped them.
func RecordHistoryDrop(ctx context.Context, s any, drop HistoryDrop, actor string) error {
	if len(drop.Months) == 0 {
		return nil
	}
	var end time.Time
	labels := make([]string, len(drop.Months))
	for i, m := range drop.Months {
		labels[i] = m.Label()
		if m.End().After(end) {
			end = m.End()
		}
	}
	return RecordNote(ctx, s, NoteRetention, actor, Retention{CutoffMS: end.UnixMilli(), Deleted: drop.Events(),
		What: "history months " + strings.Join(labels, ", ") + " dropped whole, with their attempts"})
}

// ChainTable, ChainHeadTable and AuditLogTable name the audit chain's
// tables of an outbox.
func (t Tables) ChainTable() string     { return t.Outbox + "_chain" }
func (t Tables) ChainHeadTable() string { return t.Outbox + "_chain_head" }
func (t Tables) AuditLogTable() string  { return t.Outbox + "_audit_log" }
