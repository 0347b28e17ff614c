package admin

import (
	"context"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/runes"
	"github.com/txoutbox/outbox/store"
)

// statsJSON is the answer of GET /api/v1/stats. Every figure reads an
// index (the partial indexes of the unfinished statuses, the due index,
// the attempts' finished_at index, the relays table): nothing scans the
// outbox table, so the final statuses are not counted.
type statsJSON struct {
	DBTime               time.Time               `json:"db_time"`
	Counts               map[outbox.Status]int64 `json:"counts"`
	OldestDueAgeSeconds  float64                 `json:"oldest_due_age_seconds"`
	DeadLetters          int64                   `json:"dead_letters"`
	BlockedAggregates    int64                   `json:"blocked_aggregates"`
	Relays               int                     `json:"relays"`
	Throughput           []minuteJSON            `json:"throughput"`
	FailureRateLastHour  float64                 `json:"failure_rate_last_hour"`
	DeliveredLastHour    int64                   `json:"delivered_last_hour"`
	FailedLastHour       int64                   `json:"failed_last_hour"`
	BlockedAggregateList []blockedAggJSON        `json:"blocked_aggregate_list"`
	// CDC is the change-data-capture source's status, absent without one.
	CDC *CDCStatus `json:"cdc,omitempty"`
}

type minuteJSON struct {
	Minute    time.Time `json:"minute"`
	Delivered int64     `json:"delivered"`
	Retried   int64     `json:"retried"`
	Failed    int64     `json:"failed"`
}

type blockedAggJSON struct {
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	FailedEventID string `json:"failed_event_id"`
	Waiting       int64  `json:"waiting"`
}

func (h *Handler) stats(ctx context.Context) (statsJSON, error) {
	snap, err := h.st.Snapshot(ctx, store.SnapshotRequest{FailedBlocks: h.cfg.FailedBlocks, BlockedLimit: 10})
	if err != nil {
		return statsJSON{}, err
	}
	s := statsJSON{DBTime: snap.DBTime, Counts: snap.Counts, OldestDueAgeSeconds: snap.OldestDuePendingAge.Seconds(),
		DeadLetters: snap.DeadLetters, BlockedAggregates: snap.BlockedAggregateCount, Throughput: []minuteJSON{},
		BlockedAggregateList: []blockedAggJSON{}}
	for _, b := range snap.BlockedAggregates {
		s.BlockedAggregateList = append(s.BlockedAggregateList, blockedAggJSON{b.AggregateType, b.AggregateID, b.FailedEventID.String(), b.Waiting})
	}
	relays, err := h.q.Relays(ctx, h.cfg.RelayWithin)
	if err != nil {
		return s, err
	}
	s.Relays = len(relays)
	if s.CDC, err = h.cdcStatus(ctx); err != nil {
		return s, err
	}
	if s.Throughput, err = h.throughput.read(ctx, h.q, snap.DBTime); err != nil {
		return s, err
	}
	for _, m := range s.Throughput {
		s.DeliveredLastHour += m.Delivered
		s.FailedLastHour += m.Failed
	}
	if n := s.DeliveredLastHour + s.FailedLastHour; n > 0 {
		s.FailureRateLastHour = float64(s.FailedLastHour) / float64(n)
	}
	return s, nil
}

func (h *Handler) getStats(w http.ResponseWriter, r *http.Request, _ Identity) error {
	if len(r.URL.Query()) > 0 {
		return badRequest("stats takes no parameters")
	}
	s, err := h.stats(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s)
	return nil
}

// throughputCache keeps the per-minute counts of the minutes that are
// over, so that an overview reads only the attempts of the current minute
// (and of the one before during the first lateGrace of a minute, while
// late rows may still arrive), not the whole hour; the first overview
// after a start reads the hour.
// lateGrace is how late an attempt row may commit after its finished_at
// and still be counted in its minute.
const lateGrace = 10 * time.Second

type throughputCache struct {
	mu      sync.Mutex
	minutes map[time.Time]minuteJSON
}

func (c *throughputCache) read(ctx context.Context, q store.AdminQueries, dbNow time.Time) ([]minuteJSON, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.minutes == nil {
		c.minutes = map[time.Time]minuteJSON{}
	}
	end := dbNow.UTC().Truncate(time.Minute) // the current minute
	first := end.Add(-59 * time.Minute)
	for m := range c.minutes {
		if m.Before(first) {
			delete(c.minutes, m)
		}
	}
	settled := end.Add(-time.Minute) // minutes before this one are final
	if dbNow.Sub(end) >= lateGrace {
		settled = end
	}
	from := first
	for from.Before(settled) {
		if _, ok := c.minutes[from]; !ok {
			break
		}
		from = from.Add(time.Minute)
	}
	buckets, err := q.Throughput(ctx, dbNow.Sub(from))
	if err != nil {
		return nil, err
	}
	fresh := map[time.Time]*minuteJSON{}
	for _, b := range buckets {
		key := b.Minute.UTC()
		if key.Before(from) {
			continue
		}
		m := fresh[key]
		if m == nil {
			m = &minuteJSON{Minute: key}
			fresh[key] = m
		}
		switch b.Outcome {
		case store.Delivered:
			m.Delivered += b.Count
		case store.Retry:
			m.Retried += b.Count
		case store.Failed:
			m.Failed += b.Count
		}
	}
	var out []minuteJSON
	for m := first; !m.After(end); m = m.Add(time.Minute) {
		if m.Before(from) {
			if v, ok := c.minutes[m]; ok {
				out = append(out, v)
			}
			continue
		}
		v := minuteJSON{Minute: m}
		if f := fresh[m]; f != nil {
			v = *f
		}
		if m.Before(settled) {
			c.minutes[m] = v // over, and no longer late
		}
		if v.Delivered+v.Retried+v.Failed > 0 {
			out = append(out, v)
		}
	}
	if out == nil {
		out = []minuteJSON{}
	}
	return out, nil
}

// failureGroupLimit bounds the FAILED events one grouping reads.
const failureGroupLimit = 10000

// failureGroup is FAILED events of one route, error fingerprint and HTTP
// status.
type failureGroup struct {
	Route       string    `json:"route"`
	Fingerprint string    `json:"fingerprint"`
	HTTPStatus  int       `json:"http_status,omitempty"`
	Count       int       `json:"count"`
	FirstSeen   time.Time `json:"first_seen"`
	LastSeen    time.Time `json:"last_seen"`
	Example     string    `json:"example"`
	EventIDs    []string  `json:"event_ids"`
}

var (
	uuidRE   = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)
	hexRE    = regexp.MustCompile(`\b[0-9a-fA-F]{8,}\b`)
	numberRE = regexp.MustCompile(`\d+(\.\d+)?`)
	statusRE = regexp.MustCompile(`(?i)\bstatus:? ([1-5]\d\d)\b`)
	spaceRE  = regexp.MustCompile(`\s+`)
)

// Fingerprint normalizes an error text so that errors differing only in
// ids, numbers and durations fall in one group; it also returns the HTTP
// status the text names (0 if none).
func Fingerprint(errText string) (string, int) {
	code := 0
	if m := statusRE.FindStringSubmatch(errText); m != nil {
		code, _ = strconv.Atoi(m[1])
	}
	s := uuidRE.ReplaceAllString(errText, "<id>")
	s = hexRE.ReplaceAllStringFunc(s, func(w string) string {
		if strings.ContainsAny(w, "0123456789") {
			return "<hex>"
		}
		return w
	})
	s = numberRE.ReplaceAllString(s, "<n>")
	if code != 0 {
		s = strings.Replace(s, "status <n>", "status "+strconv.Itoa(code), 1)
	}
	s = strings.TrimSpace(spaceRE.ReplaceAllString(s, " "))
	if len(s) > 300 {
		s = runes.Truncate(s, 300) + "…"
	}
	return s, code
}

func (h *Handler) failureGroupsOf(ctx context.Context) ([]failureGroup, bool, error) {
	recs, err := h.q.FailedEvents(ctx, failureGroupLimit)
	if err != nil {
		return nil, false, err
	}
	type key struct {
		route, fp string
		code      int
	}
	groups := map[key]*failureGroup{}
	for _, r := range recs {
		fp, code := Fingerprint(r.LastError)
		k := key{h.cfg.Route(r.AggregateType, r.AggregateID, r.EventType), fp, code}
		seen := r.ProcessedAt
		if seen.IsZero() {
			seen = r.AvailableAt
		}
		g := groups[k]
		if g == nil {
			g = &failureGroup{Route: k.route, Fingerprint: fp, HTTPStatus: code, FirstSeen: seen, LastSeen: seen, Example: r.LastError}
			groups[k] = g
		}
		g.Count++
		if seen.Before(g.FirstSeen) {
			g.FirstSeen = seen
		}
		if seen.After(g.LastSeen) {
			g.LastSeen = seen
		}
		if len(g.EventIDs) < 5 {
			g.EventIDs = append(g.EventIDs, r.EventID.String())
		}
	}
	out := make([]failureGroup, 0, len(groups))
	for _, g := range groups {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].LastSeen.After(out[j].LastSeen)
	})
	return out, len(recs) == failureGroupLimit, nil
}

func (h *Handler) failureGroups(w http.ResponseWriter, r *http.Request, _ Identity) error {
	if len(r.URL.Query()) > 0 {
		return badRequest("failure-groups takes no parameters")
	}
	groups, truncated, err := h.failureGroupsOf(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"groups": groups, "truncated": truncated})
	return nil
}

type chainJSON struct {
	AggregateType string      `json:"aggregate_type"`
	AggregateID   string      `json:"aggregate_id"`
	Head          eventJSON   `json:"head"`
	Blocked       []eventJSON `json:"blocked"`
	BlockedCount  int64       `json:"blocked_count"`
	PastDeadline  int         `json:"past_deadline"`
}

func (h *Handler) chains(ctx context.Context, limit int) ([]chainJSON, error) {
	cs, err := h.q.BlockedChains(ctx, limit, 20)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]chainJSON, 0, len(cs))
	for _, c := range cs {
		j := chainJSON{AggregateType: c.Head.AggregateType, AggregateID: c.Head.AggregateID, Head: h.eventJSON(c.Head),
			BlockedCount: c.BlockedCount, Blocked: make([]eventJSON, 0, len(c.Blocked))}
		for _, b := range c.Blocked {
			j.Blocked = append(j.Blocked, h.eventJSON(b))
			if !b.ExpiresAt.IsZero() && !b.ExpiresAt.After(now) {
				j.PastDeadline++
			}
		}
		out = append(out, j)
	}
	return out, nil
}

func (h *Handler) blocked(w http.ResponseWriter, r *http.Request, _ Identity) error {
	v := r.URL.Query()
	for k := range v {
		if k != "limit" {
			return badRequest("unknown parameter %q: blocked takes limit", k)
		}
	}
	limit, err := parseLimit(v, 50, 200)
	if err != nil {
		return err
	}
	out, err := h.chains(r.Context(), limit)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"aggregates": out})
	return nil
}

type relayJSON struct {
	RelayID     string    `json:"relay_id"`
	Host        string    `json:"host"`
	StartedAt   time.Time `json:"started_at"`
	HeartbeatAt time.Time `json:"last_heartbeat"`
	InFlight    int       `json:"batches_in_flight"`
}

func (h *Handler) relayList(ctx context.Context) ([]relayJSON, error) {
	rs, err := h.q.Relays(ctx, h.cfg.RelayWithin)
	if err != nil {
		return nil, err
	}
	out := make([]relayJSON, len(rs))
	for i, r := range rs {
		out[i] = relayJSON{r.RelayID, r.Host, r.StartedAt, r.HeartbeatAt, r.InFlight}
	}
	return out, nil
}

func (h *Handler) relays(w http.ResponseWriter, r *http.Request, _ Identity) error {
	if len(r.URL.Query()) > 0 {
		return badRequest("relays takes no parameters")
	}
	out, err := h.relayList(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"relays": out})
	return nil
}
