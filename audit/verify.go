package audit

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"time"

	"github.com/txoutbox/outbox/store"
)

// Options tune Verify.
type Options struct {
	// Keys are the public keys of the anchors' signers. An anchor whose
	// key is not among them is counted as unchecked, not as a failure.
	Keys []ed25519.PublicKey
	// External are anchors kept outside the database (the relay's log,
	// the output of `outbox audit anchor`): they show links deleted from
	// the chain's tail together with the anchors in the audit log.
	External []Anchor
	// Progress, when set, is called after each page of links.
	Progress func(checked, total int64)
}

// Problem is one place where the trail does not match its chain.
type Problem struct {
	// Seq is the link concerned (0: the chain as a whole).
	Seq  int64           `json:"seq"`
	Kind store.ChainKind `json:"kind,omitempty"`
	Ref  string          `json:"ref,omitempty"`
	What string          `json:"what"`
}

func (p Problem) String() string {
	if p.Seq == 0 {
		return p.What
	}
	if p.Kind == "" {
		return fmt.Sprintf("link %d: %s", p.Seq, p.What)
	}
	return fmt.Sprintf("link %d (%s %s): %s", p.Seq, p.Kind, p.Ref, p.What)
}

// Report is what Verify found.
type Report struct {
	Table string          `json:"table"`
	Head  store.ChainHead `json:"head"`
	// Links counts the links walked, by kind in ByKind.
	Links  int64                     `json:"links"`
	ByKind map[store.ChainKind]int64 `json:"by_kind"`
	// Retained counts records absent because a retention note removed
	// them on purpose (they were chained before its cutoff).
	Retained int64 `json:"retained"`
	// Anchors counts the anchors whose signature and hash were checked,
	// Unchecked those signed by a key not given.
	Anchors   int `json:"anchors"`
	Unchecked int `json:"unchecked_anchors"`
	// Before counts the records written before the chain began.
	Before int64 `json:"before_chain"`
	// Problems lists the first MaxProblems problems, the first found
	// first; More counts the others.
	Problems []Problem `json:"problems"`
	More     int64     `json:"more_problems"`
}

// OK says the trail matches its chain.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// MaxProblems bounds Report.Problems.
const MaxProblems = 20

func (r *Report) problem(p Problem) {
	if len(r.Problems) < MaxProblems {
		r.Problems = append(r.Problems, p)
		return
	}
	r.More++
}

// retentionSlack widens a retention's cutoff for the records dated by
// when they were chained: an attempt of an event that finished just
// before the cutoff is chained when the attempt's transaction commits,
// a little after.
const retentionSlack = time.Minute

// pageSize is how many links Verify reads at once.
const pageSize = 1000

// Verify walks the audit chain of table: every link must follow from the
// one before it, every record a link names must still have the digest it
// had when it was chained, every anchor
// must match the link it signed, and every record written since the chain
// began must be in it. It returns what it found; an error means it could
// not read the chain.
func Verify(ctx context.Context, c store.AuditChain, table string, o Options) (Report, error) {
	r := Report{Table: table, ByKind: map[store.ChainKind]int64{}}
	head, err := c.Head(ctx)
	if err != nil {
		return r, err
	}
	r.Head = head
	anchors, err := collectAnchors(ctx, c, table, o.External)
	if err != nil {
		return r, err
	}
	want := map[int64]string{} // seq -> hash of that link, for the anchors
	for _, a := range anchors {
		want[a.Seq] = ""
	}
	notes, err := c.Notes(ctx, store.NoteRetention)
	if err != nil {
		return r, err
	}
	var cutoff int64
	for _, n := range notes {
		var rt store.Retention
		if json.Unmarshal([]byte(n.Detail), &rt) == nil {
			cutoff = max(cutoff, rt.Cutoff(n))
		}
	}

	prev, last := store.GenesisHash, int64(0)
	for {
		links, err := c.Links(ctx, last, pageSize)
		if err != nil {
			return r, err
		}
		if len(links) == 0 {
			break
		}
		for _, l := range links {
			if l.Seq != last+1 {
				r.problem(Problem{Seq: last + 1, What: fmt.Sprintf("links %d to %d are missing: rows of the chain were deleted", last+1, l.Seq-1)})
				prev = "" // the next link cannot follow from a missing one
			}
			if prev != "" && store.LinkHash(prev, l) != l.Hash {
				r.problem(Problem{Seq: l.Seq, Kind: l.Kind, Ref: l.Ref, What: "the link does not follow from the link before it: the chain was edited"})
			}
			if _, ok := want[l.Seq]; ok {
				want[l.Seq] = l.Hash
			}
			prev, last = l.Hash, l.Seq
			r.Links++
			r.ByKind[l.Kind]++
		}
		if err := checkRecords(ctx, c, links, cutoff, &r); err != nil {
			return r, err
		}
		if o.Progress != nil {
			o.Progress(r.Links, head.Seq)
		}
	}
	checkAnchors(anchors, want, last, o.Keys, &r)
	for _, kind := range store.ChainKinds {
		u, err := c.Unchained(ctx, kind)
		if err != nil {
			return r, err
		}
		r.Before += u.Before
		if u.Count > 0 {
			r.problem(Problem{Kind: kind, What: fmt.Sprintf("%d %s record(s) written since the chain began are in no link (for example %v): they were written with the chain's trigger disabled", u.Count, kind, u.Refs)})
		}
	}
	return r, nil
}

// checkRecords compares each link's digest with its record as it is now.
func checkRecords(ctx context.Context, c store.AuditChain, links []store.ChainLink, cutoff int64, r *Report) error {
	byKind := map[store.ChainKind][]store.ChainLink{}
	for _, l := range links {
		byKind[l.Kind] = append(byKind[l.Kind], l)
	}
	for kind, ls := range byKind {
		if !known(kind) {
			for _, l := range ls {
				r.problem(Problem{Seq: l.Seq, Kind: l.Kind, Ref: l.Ref, What: "the link names a kind of record outbox never chains"})
			}
			continue
		}
		for start := 0; start < len(ls); start += 200 {
			part := ls[start:min(start+200, len(ls))]
			refs := make([]string, len(part))
			for i, l := range part {
				refs[i] = l.Ref
			}
			now, err := c.Digests(ctx, kind, refs)
			if err != nil {
				return err
			}
			for _, l := range part {
				d, ok := now[l.Ref]
				switch {
				case !ok && l.RecordMS < cutoff+retentionSlack.Milliseconds():
					r.Retained++
				case !ok:
					r.problem(Problem{Seq: l.Seq, Kind: l.Kind, Ref: l.Ref, What: "the record was deleted after it was chained at " + ms(l.ChainedMS)})
				case d != l.Digest:
					r.problem(Problem{Seq: l.Seq, Kind: l.Kind, Ref: l.Ref, What: "the record was changed after it was chained at " + ms(l.ChainedMS)})
				}
			}
		}
	}
	return nil
}

func known(k store.ChainKind) bool {
	for _, x := range store.ChainKinds {
		if x == k {
			return true
		}
	}
	return false
}

func ms(v int64) string { return time.UnixMilli(v).UTC().Format(time.RFC3339Nano) }

// collectAnchors reads the anchors of the audit log and adds the external
// ones (those of another table are refused).
func collectAnchors(ctx context.Context, c store.AuditChain, table string, external []Anchor) ([]Anchor, error) {
	notes, err := c.Notes(ctx, store.NoteAnchor)
	if err != nil {
		return nil, err
	}
	var out []Anchor
	for _, n := range notes {
		a, err := ParseAnchor(n.Detail)
		if err != nil {
			return nil, fmt.Errorf("audit log note %d: %w", n.ID, err)
		}
		out = append(out, a)
	}
	for _, a := range external {
		if a.Table != table {
			return nil, fmt.Errorf("an anchor of table %s cannot verify table %s", a.Table, table)
		}
		out = append(out, a)
	}
	return out, nil
}

// checkAnchors checks each anchor against the link it signed.
func checkAnchors(anchors []Anchor, hashAt map[int64]string, last int64, keys []ed25519.PublicKey, r *Report) {
	for _, a := range anchors {
		var key ed25519.PublicKey
		for _, k := range keys {
			if KeyID(k) == a.KeyID {
				key = k
			}
		}
		if key == nil {
			r.Unchecked++
			continue
		}
		r.Anchors++
		what := fmt.Sprintf("the anchor signed at %s by key %s", a.At.UTC().Format(time.RFC3339), a.KeyID)
		switch {
		case !a.Verify(key):
			r.problem(Problem{Seq: a.Seq, What: what + " has a signature that does not verify: it was forged or edited"})
		case a.Seq > last:
			r.problem(Problem{Seq: a.Seq, What: fmt.Sprintf("%s covers link %d, but the chain ends at link %d: links were deleted from its tail", what, a.Seq, last)})
		case a.Seq > 0 && hashAt[a.Seq] != a.Hash:
			r.problem(Problem{Seq: a.Seq, What: what + " holds another hash for this link: the chain was rewritten"})
		}
	}
}
