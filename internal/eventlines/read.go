// Package eventlines reads the input of `outbox enqueue`: events as JSON,
// one object per line. Every line is parsed and validated before any is
// returned, so that one bad line refuses the whole input with its line
// number ("line 3: aggregate_id: is required; nothing was enqueued").
//
// Text fields are read from the raw JSON, so that they reach the database
// exactly as the producer wrote them or are refused: a JSON decoder would
// replace invalid UTF-8 and lone surrogate escapes with U+FFFD, which
// could silently merge two aggregates.
package eventlines

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/txoutbox/outbox"
)

// eventLine is one input line, each field kept as the raw JSON the
// producer wrote: a JSON decoder replaces invalid UTF-8 and lone surrogate
// escapes with U+FFFD, which would silently change an id (and could merge
// two aggregates). The fields are read by the helpers of text.go,
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
	// EncryptionSubject: see outbox.Event.EncryptionSubject.
	EncryptionSubject json.RawMessage `json:"encryption_subject"`
}

// onExpiredLine is the "on_expired" object of a line.
type onExpiredLine struct {
	EventType json.RawMessage `json:"event_type"`
	Payload   json.RawMessage `json:"payload"`
}

// Read parses and validates every line of r, checking each event against
// limits, and returns the events and the line number of each. Blank lines
// are skipped. A refused line gives an error naming it, which matches
// outbox.ErrInvalidEvent when the line is refused (and not r), and no
// events.
func Read(r io.Reader, limits outbox.Limits) ([]outbox.Event, []int, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	maxLine := limits.MaxPayloadBytes + limits.MaxHeadersBytes + 64<<10
	var events []outbox.Event
	var lines []int
	for n := 1; ; n++ {
		line, err := readLine(br, maxLine)
		if errors.Is(err, errLineTooLong) {
			return nil, nil, BadLine(n, len(events), lineProblem("", "is longer than %d bytes (payload limit %d)", maxLine, limits.MaxPayloadBytes))
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, nil, fmt.Errorf("read stdin: %w", err)
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			ev, err := Parse(trimmed)
			if err == nil {
				err = ev.Validate(limits)
			}
			if err != nil {
				return nil, nil, BadLine(n, len(events), err)
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

// Parse reads one line into an event, without validating it against
// limits. Its errors are *outbox.InvalidEventError (Field "" for a line
// that is no JSON event).
func Parse(line []byte) (outbox.Event, error) {
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
		{"encryption_subject", l.EncryptionSubject, &ev.EncryptionSubject},
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
