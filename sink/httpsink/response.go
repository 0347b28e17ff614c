package httpsink

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
)

const (
	// drainLimit bounds how much of a response body is read so that the
	// connection can be reused; a longer body costs the connection instead.
	drainLimit = 64 << 10
	// excerptLimit bounds the part of a response body quoted in an error.
	excerptLimit = 200
	// maxRetryAfter caps the delay a receiver may ask for.
	maxRetryAfter = time.Hour
)

// result turns a response into the message's result, then drains and
// closes the body. When pctx asks for receipts, the answer is recorded
// (sent are the request's headers, for the signature).
func (s *Sink) result(pctx context.Context, m *outbox.Message, resp *http.Response, sent http.Header) error {
	defer resp.Body.Close()
	wants := sink.WantsReceipts(pctx)
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 && !wants {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, drainLimit+1))
	if wants {
		sink.RecordReceipt(pctx, m, s.receipt(resp, body, sent))
	}
	if len(body) > drainLimit {
		body = body[:drainLimit]
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return nil
	}
	msg := fmt.Sprintf("http sink: event %s: POST %s: status %d %s", m.EventID, s.display, resp.StatusCode, http.StatusText(resp.StatusCode))
	if ex := s.excerpt(body); ex != "" {
		msg += ": " + ex
	}
	code := resp.StatusCode
	switch {
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		after := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		if after > 0 {
			msg += fmt.Sprintf(" (receiver asked to retry after %s)", after)
		}
		return outbox.Retryable(&StatusError{StatusCode: code, msg: msg}, after)
	case code >= 300 && code <= 399:
		msg += "; redirects are not followed: point the sink URL at the final location"
		if loc := s.excerpt([]byte(resp.Header.Get("Location"))); loc != "" {
			msg += " (Location: " + loc + ")"
		}
	default:
		msg += "; the receiver rejected the event: fix the receiver or the event, then requeue it"
	}
	return outbox.Permanent(&StatusError{StatusCode: code, msg: msg})
}

// StatusError is the error of a delivery that got a response other than
// 2xx. The sink wraps it in an [outbox.PublishError] that says whether the
// status is worth retrying; errors.As finds it through that wrapper.
type StatusError struct {
	// StatusCode is the response's status code, e.g. 503.
	StatusCode int
	msg        string
}

// Error says the event, the endpoint, the status and a short excerpt of the
// response body (with configured secrets scrubbed).
func (e *StatusError) Error() string { return e.msg }

// parseRetryAfter reads a Retry-After header: delay seconds or an HTTP
// date. It returns 0 for a missing, malformed or past value and caps the
// result at maxRetryAfter.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if v[0] >= '0' && v[0] <= '9' {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
				return maxRetryAfter
			}
			return 0
		}
		if n >= uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		return time.Duration(n) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	d := t.Sub(now)
	if d <= 0 {
		return 0
	}
	return min(d, maxRetryAfter)
}

// excerpt returns a printable prefix of a response body of at most
// excerptLimit bytes, with the configured secrets scrubbed out first (a
// receiver may echo the request's headers).
func (s *Sink) excerpt(b []byte) string {
	if len(b) > excerptLimit+s.longestSecret {
		b = b[:excerptLimit+s.longestSecret]
	}
	text := strings.ToValidUTF8(string(b), "\uFFFD")
	for _, secret := range s.secrets {
		text = strings.ReplaceAll(text, secret, "[redacted]")
	}
	text = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, text)
	text = strings.Join(strings.Fields(text), " ")
	if len(text) > excerptLimit {
		cut := excerptLimit - len("...")
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + "..."
	}
	return text
}

// receipt is the receipt of a response whose body (read up to
// drainLimit+1 bytes) is body; sent are the request's headers.
func (s *Sink) receipt(resp *http.Response, body []byte, sent http.Header) *sink.Receipt {
	truncated := len(body) > drainLimit
	if truncated {
		body = body[:drainLimit]
	}
	r := &sink.HTTPReceipt{
		Status:        resp.StatusCode,
		BodySHA256:    sink.SHA256Hex(body),
		BodyBytes:     len(body),
		BodyTruncated: truncated,
		HeadersSHA256: sink.HeadersDigest(resp.Header),
	}
	if s.signer != nil {
		r.Signature = sent.Get(headerWebhookSig)
		r.SignatureTimestamp = sent.Get(headerWebhookTime)
		r.SignatureID = sent.Get(headerWebhookID)
	}
	return &sink.Receipt{Kind: "http", Destination: s.display, AnsweredAt: time.Now().UTC(), HTTP: r}
}
