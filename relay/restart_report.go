package relay

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/store"
)

// restartReport logs, once at start, one line on what passed its deadline
// while no relay ran (the events the sweeper is about to end EXPIRED):
// how many, the oldest and newest deadline, and their routes.
func (r *Relay) restartReport(ctx context.Context) {
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	o, err := r.cfg.Store.Overdue(qctx)
	if err != nil {
		r.log.Warn("restart report: cannot read what expired while no relay ran", "err", err)
		return
	}
	if o.Count == 0 {
		r.log.Info("restart report: nothing expired while no relay ran")
		return
	}
	r.log.Warn("restart report: events expired while no relay ran; they end EXPIRED now, never sent",
		"count", o.Count,
		"oldest_deadline", o.Oldest.UTC().Format(time.RFC3339Nano),
		"newest_deadline", o.Newest.UTC().Format(time.RFC3339Nano),
		"routes", overdueRoutes(r.cfg.Sink, o))
}

// overdueRoutes renders the routes of o's groups with their counts, the
// largest first, e.g. "payment.events=12 merchant.events=3".
func overdueRoutes(s sink.Sink, o store.Overdue) string {
	counts := map[string]int64{}
	var listed int64
	for _, g := range o.Groups {
		m := outbox.Message{AggregateType: g.AggregateType, AggregateID: g.SampleAggregateID, EventType: g.EventType}
		counts[sink.DestinationOf(s, &m)] += g.Count
		listed += g.Count
	}
	routes := make([]string, 0, len(counts))
	for route := range counts {
		routes = append(routes, route)
	}
	sort.Slice(routes, func(i, j int) bool {
		if counts[routes[i]] != counts[routes[j]] {
			return counts[routes[i]] > counts[routes[j]]
		}
		return routes[i] < routes[j]
	})
	parts := make([]string, 0, len(routes)+1)
	for _, route := range routes {
		parts = append(parts, fmt.Sprintf("%s=%d", route, counts[route]))
	}
	if rest := o.Count - listed; rest > 0 {
		parts = append(parts, fmt.Sprintf("other=%d", rest))
	}
	return strings.Join(parts, " ")
}
