package httpsink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

// send delivers one message: it waits for a slot, then POSTs it unless the
// context, Close or the message's deadline forbids.
func (s *Sink) send(ctx context.Context, m *outbox.Message) error {
	if err := s.pre.Check(ctx, m, nil, time.Now()); err != nil {
		return err
	}
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return s.pre.NotSent(m, sinkkit.ReasonContextEnded, ctx.Err())
	case <-s.closing:
		return s.pre.NotSent(m, sinkkit.ReasonClosed, outbox.ErrClosed)
	}
	defer func() { <-s.sem }()
	// Waiting for the slot took time: check again.
	if err := s.pre.Check(ctx, m, nil, time.Now()); err != nil {
		return err
	}
	deadline, byEvent := time.Now().Add(s.cfg.Timeout), false
	if !m.Deadline.IsZero() && m.Deadline.Before(deadline) {
		deadline, byEvent = m.Deadline, true
	}
	rctx, end, ok := s.begin(ctx, deadline)
	if !ok {
		return s.pre.NotSent(m, sinkkit.ReasonClosed, outbox.ErrClosed)
	}
	defer end()
	return s.post(ctx, rctx, m, byEvent)
}

// post sends the request and classifies the outcome. pctx is the Publish
// context, rctx the request's.
func (s *Sink) post(pctx, rctx context.Context, m *outbox.Message, byEvent bool) error {
	h, err := s.requestHeader(m)
	if err != nil {
		return outbox.Permanent(fmt.Errorf("http sink: event %s: %w", m.EventID, err))
	}
	body := []byte(m.Payload)
	switch s.cfg.Format {
	case sinkkit.FormatCloudEvents:
		for _, a := range sinkkit.CloudEventAttributes(m, s.cfg.Source) {
			h["Ce-"+http.CanonicalHeaderKey(a.Name)] = []string{percentEncode(a.Value)}
		}
	case sinkkit.FormatCloudEventsStructured:
		if body, err = sinkkit.CloudEventJSON(m, s.cfg.Source); err != nil {
			return outbox.Permanent(fmt.Errorf("http sink: %w", err))
		}
		h["Content-Type"] = []string{sinkkit.CloudEventsJSON}
	}
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, s.target, bytes.NewReader(body))
	if err != nil {
		// The URL was validated by New; report without quoting it.
		return outbox.Permanent(fmt.Errorf("http sink: event %s: cannot build the request for %s", m.EventID, s.display))
	}
	req.Header = h
	if s.signer != nil {
		id := m.EventID.String()
		ts, sig := s.signer.sign(id, time.Now(), body)
		h[headerWebhookID] = []string{id}
		h[headerWebhookTime] = []string{ts}
		h[headerWebhookSig] = []string{sig}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		err = s.transportError(pctx, rctx, m, err, byEvent)
		if pctx.Err() == nil && !errors.Is(err, errCloseAborted) {
			s.health.Down(err)
		}
		return err
	}
	s.health.Up()
	return s.result(pctx, m, resp, h)
}

// transportError classifies a request that got no response. Only a
// connection refused by the SSRF guard is permanent.
func (s *Sink) transportError(pctx, rctx context.Context, m *outbox.Message, err error, byEvent bool) error {
	// The *url.Error quotes the URL with its query; say the endpoint instead.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	prefix := fmt.Sprintf("http sink: event %s: POST %s", m.EventID, s.display)
	var refused *refusedAddrError
	switch {
	case errors.As(err, &refused):
		return outbox.Permanent(fmt.Errorf("%s: %w", prefix, refused))
	case errors.Is(context.Cause(rctx), errCloseAborted):
		return outbox.Retryable(fmt.Errorf("%s: interrupted: %w", prefix, errCloseAborted), 0)
	case pctx.Err() != nil:
		return outbox.Retryable(fmt.Errorf("%s: interrupted: the publish context ended: %w", prefix, pctx.Err()), 0)
	case errors.Is(rctx.Err(), context.DeadlineExceeded) && byEvent:
		return outbox.Retryable(fmt.Errorf("%s: no response before the event's deadline: %w", prefix, context.DeadlineExceeded), 0)
	case errors.Is(rctx.Err(), context.DeadlineExceeded):
		return outbox.Retryable(fmt.Errorf("%s: no response within %s (raise Timeout if the receiver is slow): %w", prefix, s.cfg.Timeout, context.DeadlineExceeded), 0)
	}
	return outbox.Retryable(fmt.Errorf("%s: %w", prefix, err), 0)
}

// percentEncode encodes a CloudEvents attribute value for an HTTP header
// as the HTTP binding asks: space, '"', '%' and every byte outside
// printable ASCII as %XX of its UTF-8 bytes.
func percentEncode(v string) string {
	clean := true
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c > '~' || c == '"' || c == '%' {
			clean = false
			break
		}
	}
	if clean {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c > '~' || c == '"' || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}
