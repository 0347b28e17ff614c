package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/txoutbox/outbox/store/internal/completion"
)

// A successful delivery is recorded on its event row (migration 00006),
// as on PostgreSQL: the delivered_* columns hold the relay, the claim
// token, the attempt number, the times and the trace id, and the
// completion writes no attempt row for it. Store.Attempts reads the union
// of the attempts table and the row; an operator action moves the row's
// delivery into the attempts table first (admin.go).

// deliveredSets are the assignments that record the deliveries outs on
// their rows: the relay and the claim token, and per row (CASE) the
// attempt number, the start and finish times (the database clock now when
// zero, or UTC_TIMESTAMP(6) when now is "") and the trace id. Other rows
// keep their values. The ids and CASE arms are integers and placeholders.
func deliveredSets(p *completion.Plan, outs []*completion.Row, now string) (string, []any) {
	if len(outs) == 0 {
		return "", nil
	}
	ids := make([]int64, len(outs))
	for i, o := range outs {
		ids[i] = o.ID
	}
	in := idList(ids)
	var args []any
	var b strings.Builder
	b.WriteString("delivered_relay_id = CASE WHEN id IN (" + in + ") THEN ? ELSE delivered_relay_id END, ")
	b.WriteString("delivered_token = CASE WHEN id IN (" + in + ") THEN ? ELSE delivered_token END")
	args = append(args, p.StoredRelayID, p.Token)
	// Each column's CASE has one arm per distinct value, over the ids
	// that take it: a relay's batch shares its times and mostly its
	// attempt number, and an IN list of constants is a binary search,
	// where one arm per row would be tried one by one for every row.
	perRow := func(col string, value func(o *completion.Row) (string, any)) {
		type arm struct {
			expr string
			arg  any
			ids  []int64
		}
		var arms []*arm
		byKey := map[string]*arm{}
		for _, o := range outs {
			expr, a := value(o)
			key := expr + "\x00" + fmt.Sprint(a)
			if x := byKey[key]; x != nil {
				x.ids = append(x.ids, o.ID)
				continue
			}
			x := &arm{expr: expr, arg: a, ids: []int64{o.ID}}
			byKey[key] = x
			arms = append(arms, x)
		}
		b.WriteString(", " + col + " = CASE")
		for _, x := range arms {
			b.WriteString(" WHEN id IN (" + idList(x.ids) + ") THEN " + x.expr)
			if strings.Contains(x.expr, "?") {
				args = append(args, x.arg)
			}
		}
		b.WriteString(" ELSE " + col + " END")
	}
	at := func(t time.Time) (string, any) {
		switch {
		case !t.IsZero():
			return "CAST(? AS DATETIME(6))", formatTime(t)
		case now != "":
			return "CAST(? AS DATETIME(6))", now
		}
		return "UTC_TIMESTAMP(6)", nil
	}
	perRow("delivered_attempt", func(o *completion.Row) (string, any) { return "?", o.Attempt })
	perRow("delivered_started_at", func(o *completion.Row) (string, any) { return at(o.StartedAt) })
	perRow("delivered_finished_at", func(o *completion.Row) (string, any) { return at(o.FinishedAt) })
	perRow("delivered_trace_id", func(o *completion.Row) (string, any) {
		if o.TraceID == "" {
			return "NULL", nil
		}
		return "?", o.TraceID
	})
	// The receipts only when the sink recorded some: a batch without
	// writes what it wrote before them.
	if slices.ContainsFunc(outs, func(o *completion.Row) bool { return o.Receipt != nil }) {
		perRow("delivered_receipt", func(o *completion.Row) (string, any) {
			if o.Receipt == nil {
				return "NULL", nil
			}
			return "?", string(o.Receipt)
		})
	}
	return b.String(), args
}

// deliveredReplays reads which rows of the deliveries recorded on their
// rows that were not applied now (completion.Plan.ReplayCandidates) are
// PROCESSED with their delivery recorded under the plan's token: the
// outcome is a replay (after an ambiguous commit) and writes nothing.
func (s *Store) deliveredReplays(ctx context.Context, tx *sql.Tx, p *completion.Plan, applied map[int64]bool) (map[int64]bool, error) {
	ids := p.ReplayCandidates(applied)
	if len(ids) == 0 {
		return nil, nil
	}
	q, err := s.renderComplete("complete.delivered_replays", fragments{IDs: idList(ids)})
	if err != nil {
		return nil, err
	}
	found, err := queryIDs(ctx, tx, q, p.Token)
	if err != nil {
		return nil, err
	}
	replays := make(map[int64]bool, len(found))
	for _, id := range found {
		replays[id] = true
	}
	return replays, nil
}
