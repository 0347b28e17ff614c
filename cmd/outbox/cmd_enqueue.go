package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/txoutbox/outbox"
)

// EnqueueCmd reads JSON events, one per line, and enqueues them in one
// transaction.
type EnqueueCmd struct {
	MaxPayloadBytes int  `help:"Largest payload accepted, in bytes." default:"1048576" env:"OUTBOX_MAX_PAYLOAD_BYTES"`
	JSON            bool `name:"json" help:"Print the ids as one JSON array."`
}

// eventLine is one input line.
type eventLine struct {
	EventID       string            `json:"event_id"`
	AggregateType string            `json:"aggregate_type"`
	AggregateID   string            `json:"aggregate_id"`
	EventType     string            `json:"event_type"`
	Payload       json.RawMessage   `json:"payload"`
	Headers       map[string]string `json:"headers"`
	TTL           string            `json:"ttl"`
	ExpiresAt     *time.Time        `json:"expires_at"`
	Delay         string            `json:"delay"`
	AvailableAt   *time.Time        `json:"available_at"`
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
			return fmt.Errorf("line %d: %s: %s; nothing was enqueued", line, ie.Field, ie.Reason)
		}
		return fmt.Errorf("enqueue: %w; nothing was enqueued", err)
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
			return nil, nil, fmt.Errorf("line %d is longer than %d bytes (payload limit %d); nothing was enqueued", n, maxLine, limits.MaxPayloadBytes)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, nil, fmt.Errorf("read stdin: %w", err)
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			ev, perr := parseEventLine(trimmed)
			if perr != nil {
				return nil, nil, fmt.Errorf("line %d: %v; nothing was enqueued", n, perr)
			}
			if verr := ev.Validate(limits); verr != nil {
				var ie *outbox.InvalidEventError
				if errors.As(verr, &ie) {
					return nil, nil, fmt.Errorf("line %d: %s: %s; nothing was enqueued", n, ie.Field, ie.Reason)
				}
				return nil, nil, fmt.Errorf("line %d: %v; nothing was enqueued", n, verr)
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

func parseEventLine(line []byte) (outbox.Event, error) {
	var l eventLine
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return outbox.Event{}, fmt.Errorf("not a valid JSON event: %v", err)
	}
	if dec.More() {
		return outbox.Event{}, fmt.Errorf("more than one JSON value on the line")
	}
	ev := outbox.Event{
		AggregateType: l.AggregateType,
		AggregateID:   l.AggregateID,
		EventType:     l.EventType,
		Payload:       l.Payload,
		Headers:       l.Headers,
	}
	if l.EventID != "" {
		id, err := outbox.ParseEventID(l.EventID)
		if err != nil {
			return ev, fmt.Errorf("event_id: %v", err)
		}
		ev.ID = id
	}
	var err error
	if ev.TTL, err = parseDuration("ttl", l.TTL); err != nil {
		return ev, err
	}
	if ev.Delay, err = parseDuration("delay", l.Delay); err != nil {
		return ev, err
	}
	if l.ExpiresAt != nil {
		ev.ExpiresAt = *l.ExpiresAt
	}
	if l.AvailableAt != nil {
		ev.AvailableAt = *l.AvailableAt
	}
	return ev, nil
}

func parseDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration; use a form like \"66s\" or \"5m\"", field, s)
	}
	return d, nil
}
