package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
)

// EnqueueCmd reads JSON events, one per line, and enqueues them in one
// transaction.
type EnqueueCmd struct {
	MaxPayloadBytes int  `help:"Largest payload accepted, in bytes." default:"1048576" env:"OUTBOX_ENQUEUE_MAX_PAYLOAD_BYTES"`
	JSON            bool `name:"json" help:"Print the ids as one JSON array."`
}

// eventLine is one input line, each field kept as the raw JSON the
// producer wrote: a JSON decoder replaces invalid UTF-8 and lone surrogate
// escapes with U+FFFD, which would silently change an id (and could merge
// two aggregates). The fields are read by the helpers of enqueue_text.go,
// which refuse such text instead.
type eventLine struct {
	EventID       json.RawMessage `json:"event_id"`
	AggregateType json.RawMessage `json:"aggregate_type"`
	AggregateID   json.RawMessage `json:"aggregate_id"`
	EventType     json.RawMessage `json:"event_type"`
	Payload       json.RawMessage `json:"payload"`
	Headers       json.RawMessage `json:"headers"`
	TTL           json.RawMessage `json:"ttl"`
	ExpiresAt     json.RawMessage `json:"expires_at"`
	Delay         json.RawMessage `json:"delay"`
	AvailableAt   json.RawMessage `json:"available_at"`
	OnExpired     json.RawMessage `json:"on_expired"`
}

// onExpiredLine is the "on_expired" object of a line.
type onExpiredLine struct {
	EventType json.RawMessage `json:"event_type"`
	Payload   json.RawMessage `json:"payload"`
}

// Run reads stdin and enqueues.
func (c *EnqueueCmd) Run(ctx context.Context, g *Globals) error {
	limits := outbox.Limits{MaxPayloadBytes: c.MaxPayloadBytes}
	if err := limits.Validate(); err != nil {
		return err
	}
	events, lines, err := readEvents(g.stdin, limits.WithDefaults())
	if err != nil {
		return err
	}
	if len(events) == 0 {
		return fmt.Errorf("no events on stdin: give one JSON object per line, e.g. {\"aggregate_type\":\"payment\",\"aggregate_id\":\"tx-1\",\"event_type\":\"ApprovalRequested\",\"payload\":{}}")
	}
	b, err := openBackend(ctx, g.DB, g.Table, limits, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	ids, err := b.enqueue(ctx, events)
	if err != nil {
		var ie *outbox.InvalidEventError
		if errors.As(err, &ie) {
			line := ie.Index + 1
			if ie.Index >= 0 && ie.Index < len(lines) {
				line = lines[ie.Index]
			}
			return badLine(line, ie.Index, err)
		}
		if !strings.HasPrefix(err.Error(), "enqueue: ") { // the backends' own errors say it already
			err = fmt.Errorf("enqueue: %w", err)
		}
		return fmt.Errorf("%w; nothing was enqueued", err)
	}
	if c.JSON {
		return json.NewEncoder(g.stdout).Encode(ids)
	}
	w := bufio.NewWriter(g.stdout)
	for _, id := range ids {
		fmt.Fprintln(w, id)
	}
	return w.Flush()
}

// readEvents parses and validates every line before anything is written,
// so that one bad line rejects the whole batch with its line number.
// It returns the events and the line number of each.
func readEvents(r io.Reader, limits outbox.Limits) ([]outbox.Event, []int, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	maxLine := limits.MaxPayloadBytes + limits.MaxHeadersBytes + 64<<10
	var events []outbox.Event
	var lines []int
	for n := 1; ; n++ {
		line, err := readLine(br, maxLine)
		if errors.Is(err, errLineTooLong) {
			return nil, nil, badLine(n, len(events), lineProblem("", "is longer than %d bytes (payload limit %d)", maxLine, limits.MaxPayloadBytes))
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, nil, fmt.Errorf("read stdin: %w", err)
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			ev, err := parseEventLine(trimmed)
			if err == nil {
				err = ev.Validate(limits)
			}
			if err != nil {
				return nil, nil, badLine(n, len(events), err)
			}
			events = append(events, ev)
			lines = append(lines, n)
		}
		if errors.Is(err, io.EOF) {
			break
		}
	}
	return events, lines, nil
}

var errLineTooLong = errors.New("line too long")

func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > max {
			return nil, errLineTooLong
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return buf, err
	}
}

// parseEventLine reads one line into an event. Its errors are
// *outbox.InvalidEventError (Field "" for a line that is no JSON event).
func parseEventLine(line []byte) (outbox.Event, error) {
	var l eventLine
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return outbox.Event{}, lineProblem("", "is not a valid JSON event: %v", err)
	}
	if dec.More() {
		return outbox.Event{}, lineProblem("", "holds more than one JSON value: put one event per line")
	}
	var ev outbox.Event
	var err error
	texts := []struct {
		field string
		raw   json.RawMessage
		dst   *string
	}{
		{"aggregate_type", l.AggregateType, &ev.AggregateType},
		{"aggregate_id", l.AggregateID, &ev.AggregateID},
		{"event_type", l.EventType, &ev.EventType},
	}
	for _, f := range texts {
		if *f.dst, err = jsonText(f.field, f.raw); err != nil {
			return ev, err
		}
	}
	ev.Payload = l.Payload
	if ev.Headers, err = jsonHeaders(l.Headers); err != nil {
		return ev, err
	}
	if id, err := jsonText("event_id", l.EventID); err != nil {
		return ev, err
	} else if id != "" {
		if ev.ID, err = outbox.ParseEventID(id); err != nil {
			return ev, lineProblem("event_id", "%v", err)
		}
	}
	if ev.TTL, err = parseDuration("ttl", l.TTL); err != nil {
		return ev, err
	}
	if ev.Delay, err = parseDuration("delay", l.Delay); err != nil {
		return ev, err
	}
	if ev.ExpiresAt, err = jsonTime("expires_at", l.ExpiresAt); err != nil {
		return ev, err
	}
	if ev.AvailableAt, err = jsonTime("available_at", l.AvailableAt); err != nil {
		return ev, err
	}
	if ev.OnExpired, err = parseOnExpired(l.OnExpired); err != nil {
		return ev, err
	}
	return ev, nil
}

// parseOnExpired reads "on_expired": {"event_type": "ApprovalExpired",
// "payload": {...}} (the payload may be left out: it is then made of the
// expired event's fields). null or absent: none.
func parseOnExpired(raw json.RawMessage) (*outbox.Compensation, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var o onExpiredLine
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return nil, lineProblem("on_expired", `must be an object like {"event_type": "ApprovalExpired", "payload": {...}}: %v`, err)
	}
	eventType, err := jsonText("on_expired.event_type", o.EventType)
	if err != nil {
		return nil, err
	}
	c := &outbox.Compensation{EventType: eventType}
	if len(o.Payload) > 0 && string(o.Payload) != "null" {
		c.Payload = o.Payload
	}
	return c, nil
}

func parseDuration(field string, raw json.RawMessage) (time.Duration, error) {
	s, err := jsonText(field, raw)
	if err != nil || s == "" {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, lineProblem(field, "%q is not a duration; use a form like \"66s\" or \"5m\"", s)
	}
	return d, nil
}
