// Package sqlchain implements store.AuditChain once over database/sql for
// the three backends, and writes the SQL expressions that the schema's
// chain triggers and the verifier share: a record's ref (its key as text)
// and its digest (the SHA-256 of its canonical content).
//
// The canonical content of a record is, for each of its columns in a fixed
// order whose value is not NULL, "name=" + the length of the value's text
// in characters + ":" + the text + ";". A NULL column adds nothing, so a
// nullable column added to a table later leaves the digests of the records
// written before it unchanged (append it to the kind's columns; never
// reorder, rename or remove one, or change how a type is written as text:
// the chained digests would no longer match). Times are written so that
// the session's time zone does not change them.
package sqlchain

import (
	"fmt"
	"strings"

	"github.com/txoutbox/outbox/store"
)

// Flavor is the SQL of one backend's expressions.
type Flavor int

// The backends.
const (
	Postgres Flavor = iota + 1
	MySQL
	SQLite
)

// colType says how a column is written as text.
type colType int

const (
	text colType = iota
	uuid
	integer
	// timestamp is a time column of the backend's stored form.
	timestamp
	json
)

type column struct {
	name string
	typ  colType
}

// record describes the rows of one kind: the table (from the outbox's
// Tables), the columns of the content, the key columns that make its ref
// (joined by "/"), and the column that says when it was written.
type record struct {
	table   func(store.Tables) string
	columns []column
	key     []string
	// written is the column of when the row was written, and writtenMS
	// says it holds Unix milliseconds (otherwise a stored time).
	written   string
	writtenMS bool
	// moved, when set, is the table the records move into (the attempts'
	// history): a record is looked for there too.
	moved func(store.Tables) string
	// recordedAt, when set, is the stored time column that dates the
	// record for retention (store.ChainLink.RecordMS); otherwise the
	// time it was chained does.
	recordedAt string
}

// records holds the chained kinds. Append columns only (see the package
// documentation).
var records = map[store.ChainKind]record{
	store.ChainAttempt: {
		table: func(t store.Tables) string { return t.Attempts },
		columns: []column{{"event_id", uuid}, {"claim_token", uuid}, {"outcome", text}, {"outbox_id", integer},
			{"attempt", integer}, {"relay_id", text}, {"started_at", timestamp}, {"finished_at", timestamp},
			{"error", text}, {"trace_id", text}, {"receipt", text}},
		key:     []string{"event_id", "claim_token", "outcome"},
		written: "finished_at",
		moved:   func(t store.Tables) string { return t.Outbox + "_attempts_history" },
	},
	store.ChainRoute: {
		table: func(t store.Tables) string { return t.RouteLogTable() },
		columns: []column{{"id", integer}, {"at_ms", integer}, {"route", text}, {"actor", text},
			{"from_state", text}, {"to_state", text}, {"reason", text}, {"last_error", text}},
		key:     []string{"id"},
		written: "at_ms", writtenMS: true,
	},
	store.ChainEvent: {
		table: func(t store.Tables) string { return t.Outbox + "_history" },
		columns: []column{{"id", integer}, {"event_id", uuid}, {"aggregate_type", text}, {"aggregate_id", text},
			{"aggregate_seq", integer}, {"event_type", text}, {"payload", json}, {"headers", json}, {"status", text},
			{"retry_count", integer}, {"created_at", timestamp}, {"available_at", timestamp}, {"expires_at", timestamp},
			{"finished_at", timestamp}, {"last_error", text}, {"delivered_relay_id", text}, {"delivered_attempt", integer},
			{"delivered_token", uuid}, {"delivered_started_at", timestamp}, {"delivered_finished_at", timestamp},
			{"delivered_trace_id", text}, {"delivered_receipt", text}},
		key:        []string{"event_id"},
		written:    "moved_at",
		recordedAt: "finished_at",
	},
	store.ChainNote: {
		table: func(t store.Tables) string { return t.AuditLogTable() },
		columns: []column{{"id", integer}, {"at_ms", integer}, {"kind", text}, {"actor", text},
			{"detail", text}},
		key:     []string{"id"},
		written: "at_ms", writtenMS: true,
	},
}

func spec(kind store.ChainKind) record {
	r, ok := records[kind]
	if !ok {
		panic(fmt.Sprintf("sqlchain: no record kind %q", kind))
	}
	return r
}

func (r record) column(name string) column {
	for _, c := range r.columns {
		if c.name == name {
			return c
		}
	}
	panic("sqlchain: no column " + name)
}

// asText writes column c of the row prefixed by pre as text.
func (f Flavor) asText(pre string, c column) string {
	x := pre + c.name
	switch f {
	case Postgres:
		switch c.typ {
		case timestamp:
			return "(extract(epoch FROM " + x + ") * 1000000)::bigint::text"
		case text:
			return x
		default:
			return x + "::text"
		}
	case MySQL:
		switch c.typ {
		case timestamp:
			return "DATE_FORMAT(" + x + ", '%Y-%m-%d %H:%i:%s.%f')"
		case integer, json:
			return "CAST(" + x + " AS CHAR)"
		default:
			return x
		}
	default:
		if c.typ == integer {
			return "CAST(" + x + " AS TEXT)"
		}
		return x
	}
}

// concat joins text expressions.
func (f Flavor) concat(parts ...string) string {
	if f == MySQL {
		return "CONCAT(" + strings.Join(parts, ", ") + ")"
	}
	return "(" + strings.Join(parts, " || ") + ")"
}

func (f Flavor) length(x string) string {
	if f == MySQL {
		return "CHAR_LENGTH(" + x + ")"
	}
	return "length(" + x + ")"
}

// Content renders the canonical content of a row of kind, its columns
// prefixed by pre ("NEW." in a trigger).
func (f Flavor) Content(kind store.ChainKind, pre string) string {
	r := spec(kind)
	pairs := make([]string, len(r.columns))
	for i, c := range r.columns {
		v := f.asText(pre, c)
		pairs[i] = "COALESCE(" + f.concat("'"+c.name+"='", f.length(v), "':'", v, "';'") + ", '')"
	}
	return f.concat(pairs...)
}

// Digest renders the hex SHA-256 of the content of a row of kind.
func (f Flavor) Digest(kind store.ChainKind, pre string) string {
	return f.Hash(f.Content(kind, pre))
}

// Hash renders the lower-case hex SHA-256 of the text expression x's UTF-8
// bytes.
func (f Flavor) Hash(x string) string {
	switch f {
	case Postgres:
		return "encode(sha256(convert_to(" + x + ", 'UTF8')), 'hex')"
	case MySQL:
		return "SHA2(" + x + ", 256)"
	default:
		return "outbox_sha256(" + x + ")"
	}
}

// RecordMS renders the time that dates a row of kind for retention, in
// Unix milliseconds, or chained (the time it is chained) for a kind dated
// by that.
func (f Flavor) RecordMS(kind store.ChainKind, pre, chained string) string {
	r := spec(kind)
	if r.recordedAt == "" {
		return chained
	}
	x := pre + r.recordedAt
	switch f {
	case Postgres:
		return "(extract(epoch FROM " + x + ") * 1000)::bigint"
	case MySQL:
		return "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', " + x + ") DIV 1000 AS SIGNED)"
	default:
		return "CAST((julianday(" + x + ") - 2440587.5) * 86400000 AS INTEGER)"
	}
}

// Ref renders the ref of a row of kind.
func (f Flavor) Ref(kind store.ChainKind, pre string) string {
	r := spec(kind)
	parts := make([]string, 0, 2*len(r.key))
	for i, k := range r.key {
		if i > 0 {
			parts = append(parts, "'/'")
		}
		parts = append(parts, f.asText(pre, r.column(k)))
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return f.concat(parts...)
}

// LinkHash renders the link hash of the trigger (store.LinkHash) from
// expressions: prev, seq, kind (a literal), ref, digest, ms (when it was
// chained) and rms (the record's time).
func (f Flavor) LinkHash(prev, seq string, kind store.ChainKind, ref, digest, ms, rms string) string {
	if f == Postgres {
		seq, ms, rms = seq+"::text", ms+"::text", rms+"::text"
	} else if f == SQLite {
		seq, ms, rms = "CAST("+seq+" AS TEXT)", "CAST("+ms+" AS TEXT)", "CAST("+rms+" AS TEXT)"
	}
	return f.Hash(f.concat(prev, "':'", seq, "':"+string(kind)+":'", ref, "':'", digest, "':'", ms, "':'", rms))
}

// Names is what a backend's migration template renders the chain's
// triggers with; a backend embeds it in its migration names.
type Names struct {
	Flavor Flavor
	Tables store.Tables
	// Clock is the dialect's database clock in Unix milliseconds.
	Clock string
}

// ChainKinds lists the kinds whose tables carry a chain trigger.
func (n Names) ChainKinds() []string {
	out := make([]string, len(store.ChainKinds))
	for i, k := range store.ChainKinds {
		out[i] = string(k)
	}
	return out
}

// ChainTableOf names the table of a kind's records.
func (n Names) ChainTableOf(kind string) string { return spec(store.ChainKind(kind)).table(n.Tables) }

// ChainRef renders the ref of the row prefixed by pre.
func (n Names) ChainRef(kind, pre string) string { return n.Flavor.Ref(store.ChainKind(kind), pre) }

// ChainDigest renders the digest of the row prefixed by pre.
func (n Names) ChainDigest(kind, pre string) string {
	return n.Flavor.Digest(store.ChainKind(kind), pre)
}

// ChainLink renders the link hash from its parts' expressions.
func (n Names) ChainLink(kind, prev, seq, ref, digest, ms, rms string) string {
	return n.Flavor.LinkHash(prev, seq, store.ChainKind(kind), ref, digest, ms, rms)
}

// ChainRecordMS renders the time that dates the row prefixed by pre, or
// chained.
func (n Names) ChainRecordMS(kind, pre, chained string) string {
	return n.Flavor.RecordMS(store.ChainKind(kind), pre, chained)
}

// ChainClockMS is the database clock in Unix milliseconds.
func (n Names) ChainClockMS() string { return n.Clock }
