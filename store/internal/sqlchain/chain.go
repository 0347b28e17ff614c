package sqlchain

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/dialect"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

var statements = sqltext.MustParseFS(sqlFiles, "sql/*.sql")

// names is what a statement renders with.
type names struct {
	d dialect.Dialect
	f Flavor
	// kind is the kind of the records the statement reads, if any.
	kind store.ChainKind
	// Q is the identifier quote; Head, Chain and Log the chain's tables,
	// Table the table of kind's records and Written its column of when a
	// record was written.
	Q, Head, Chain, Log, Table, Written string
	// Clock is the database clock in Unix milliseconds; Returning says the
	// insert returns its id; Genesis is the hash before the first link, as
	// a literal.
	Clock, Genesis string
	Returning      bool
	// Conds is a list of key conditions (Digests); Moved is the table the
	// kind's records move into, if any, and MovedConds the conditions on it.
	Conds, Moved, MovedConds string
}

// P renders the n-th placeholder.
func (n names) P(i int) string { return n.d.P(i) }

// Ref renders the ref of a record of the statement's kind.
func (n names) Ref(pre string) string { return n.f.Ref(n.kind, pre) }

// Digest renders the digest of a record of the statement's kind.
func (n names) Digest(pre string) string { return n.f.Digest(n.kind, pre) }

// Chain implements store.AuditChain on db.
type Chain struct {
	db  *sql.DB
	d   dialect.Dialect
	f   Flavor
	t   store.Tables
	own bool
}

var _ store.AuditChain = (*Chain)(nil)

// New returns the audit chain of the outbox tables t on db, whose SQL is
// d's and f's. With own, Close closes db.
func New(db *sql.DB, d dialect.Dialect, f Flavor, t store.Tables, own bool) *Chain {
	return &Chain{db: db, d: d, f: f, t: t, own: own}
}

// Close implements store.AuditChain.
func (c *Chain) Close() error {
	if c.own {
		return c.db.Close()
	}
	return nil
}

// sql renders the statement name for the records of kind (or none);
// conds are the key conditions of Digests, on the kind's table and then on
// the table its records move into.
func (c *Chain) sql(name string, kind store.ChainKind, conds ...string) string {
	n := names{d: c.d, f: c.f, kind: kind, Q: c.d.Quote, Head: c.t.ChainHeadTable(), Chain: c.t.ChainTable(),
		Log: c.t.AuditLogTable(), Clock: c.d.ClockMS, Genesis: "'" + store.GenesisHash + "'", Returning: c.f != MySQL}
	if r, ok := records[kind]; ok {
		n.Table, n.Written = r.table(c.t), r.written
		if r.moved != nil && len(conds) == 2 {
			n.Moved, n.MovedConds = r.moved(c.t), conds[1]
		}
	}
	if len(conds) > 0 {
		n.Conds = conds[0]
	}
	return statements.MustRenderNamed(name, n)
}

func (c *Chain) wrap(op string, err error) error {
	return fmt.Errorf("audit chain of %s: %s: %w", c.t.Outbox, op, err)
}

// Head implements store.AuditChain.
func (c *Chain) Head(ctx context.Context) (store.ChainHead, error) {
	var h store.ChainHead
	var genesis int64
	err := c.db.QueryRowContext(ctx, c.sql("chain.head", "")).
		Scan(&h.Seq, &h.Hash, &genesis)
	if err != nil {
		return h, c.wrap("read the head", err)
	}
	h.Genesis = time.UnixMilli(genesis).UTC()
	return h, nil
}

// Links implements store.AuditChain.
func (c *Chain) Links(ctx context.Context, afterSeq int64, limit int) ([]store.ChainLink, error) {
	rows, err := c.db.QueryContext(ctx, c.sql("chain.links", ""), afterSeq, limit)
	if err != nil {
		return nil, c.wrap("read links", err)
	}
	defer rows.Close()
	var out []store.ChainLink
	for rows.Next() {
		var l store.ChainLink
		var kind string
		if err := rows.Scan(&l.Seq, &kind, &l.Ref, &l.Digest, &l.Hash, &l.ChainedMS, &l.RecordMS); err != nil {
			return nil, c.wrap("read links", err)
		}
		l.Kind = store.ChainKind(kind)
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, c.wrap("read links", err)
	}
	return out, nil
}

// MaxDigestRefs bounds the refs of one Digests call.
const MaxDigestRefs = 200

// Digests implements store.AuditChain.
func (c *Chain) Digests(ctx context.Context, kind store.ChainKind, refs []string) (map[string]string, error) {
	r, ok := records[kind]
	if !ok {
		return nil, fmt.Errorf("audit chain: no record kind %q", kind)
	}
	if len(refs) > MaxDigestRefs {
		return nil, fmt.Errorf("audit chain: %d refs in one read: at most %d", len(refs), MaxDigestRefs)
	}
	out := make(map[string]string, len(refs))
	if len(refs) == 0 {
		return out, nil
	}
	conds, args := c.keyConds(r, refs, 0)
	if len(conds) == 0 {
		return out, nil
	}
	all := []string{strings.Join(conds, " OR ")}
	if r.moved != nil {
		moved, more := c.keyConds(r, refs, len(args))
		all = append(all, strings.Join(moved, " OR "))
		args = append(args, more...)
	}
	rows, err := c.db.QueryContext(ctx, c.sql("chain.digests", kind, all...), args...)
	if err != nil {
		return nil, c.wrap("read "+string(kind)+" records", err)
	}
	defer rows.Close()
	for rows.Next() {
		var ref, digest string
		if err := rows.Scan(&ref, &digest); err != nil {
			return nil, c.wrap("read "+string(kind)+" records", err)
		}
		out[ref] = digest
	}
	if err := rows.Err(); err != nil {
		return nil, c.wrap("read "+string(kind)+" records", err)
	}
	return out, nil
}

// keyConds writes a condition on the key columns per ref, its
// placeholders numbered after the first n; a ref no row can have is left
// out.
func (c *Chain) keyConds(r record, refs []string, n int) ([]string, []any) {
	var conds []string
	var args []any
	for _, ref := range refs {
		parts := strings.Split(ref, "/")
		if len(parts) != len(r.key) {
			continue // no row has this ref
		}
		var eq []string
		ok := true
		for i, k := range r.key {
			var arg any = parts[i]
			if r.column(k).typ == integer {
				n, err := strconv.ParseInt(parts[i], 10, 64)
				if err != nil {
					ok = false
					break
				}
				arg = n
			}
			args = append(args, arg)
			eq = append(eq, k+" = "+c.d.P(n+len(args)))
		}
		if !ok {
			continue
		}
		conds = append(conds, "("+strings.Join(eq, " AND ")+")")
	}
	return conds, args
}

// Unchained implements store.AuditChain.
func (c *Chain) Unchained(ctx context.Context, kind store.ChainKind) (store.Unchained, error) {
	u := store.Unchained{Kind: kind}
	r, ok := records[kind]
	if !ok {
		return u, fmt.Errorf("audit chain: no record kind %q", kind)
	}
	head, err := c.Head(ctx)
	if err != nil {
		return u, err
	}
	var since any = c.d.TimeArg(head.Genesis)
	if r.writtenMS {
		since = head.Genesis.UnixMilli()
	}
	if err := c.db.QueryRowContext(ctx, c.sql("chain.count_unchained", kind), since, string(kind)).Scan(&u.Count); err != nil {
		return u, c.wrap("count unchained "+string(kind)+" records", err)
	}
	if u.Count > 0 {
		rows, err := c.db.QueryContext(ctx, c.sql("chain.sample_unchained", kind), since, string(kind))
		if err != nil {
			return u, c.wrap("read unchained "+string(kind)+" records", err)
		}
		defer rows.Close()
		for rows.Next() {
			var ref string
			if err := rows.Scan(&ref); err != nil {
				return u, c.wrap("read unchained "+string(kind)+" records", err)
			}
			u.Refs = append(u.Refs, ref)
		}
		if err := rows.Err(); err != nil {
			return u, c.wrap("read unchained "+string(kind)+" records", err)
		}
	}
	err = c.db.QueryRowContext(ctx, c.sql("chain.count_before", kind), since).Scan(&u.Before)
	if err != nil {
		return u, c.wrap("count "+string(kind)+" records older than the chain", err)
	}
	return u, nil
}

// AddNote implements store.AuditChain.
func (c *Chain) AddNote(ctx context.Context, n store.AuditNote) (int64, error) {
	if n.Kind == "" || n.Actor == "" {
		return 0, fmt.Errorf("audit note: kind and actor are required")
	}
	insert := c.sql("chain.add_note", "")
	if c.f == MySQL {
		res, err := c.db.ExecContext(ctx, insert, n.Kind, n.Actor, n.Detail)
		if err != nil {
			return 0, c.wrap("write a note", err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return 0, c.wrap("write a note", err)
		}
		return id, nil
	}
	var id int64
	if err := c.db.QueryRowContext(ctx, insert, n.Kind, n.Actor, n.Detail).Scan(&id); err != nil {
		return 0, c.wrap("write a note", err)
	}
	return id, nil
}

// Notes implements store.AuditChain.
func (c *Chain) Notes(ctx context.Context, kind string) ([]store.AuditNote, error) {
	rows, err := c.db.QueryContext(ctx, c.sql("chain.notes", ""), kind)
	if err != nil {
		return nil, c.wrap("read notes", err)
	}
	defer rows.Close()
	var out []store.AuditNote
	for rows.Next() {
		var n store.AuditNote
		var ms int64
		if err := rows.Scan(&n.ID, &ms, &n.Kind, &n.Actor, &n.Detail); err != nil {
			return nil, c.wrap("read notes", err)
		}
		n.At = time.UnixMilli(ms).UTC()
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, c.wrap("read notes", err)
	}
	return out, nil
}
