package httpsink

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/txoutbox/outbox"
)

// Headers the sink sets on every request.
const (
	headerIdempotencyKey = "Idempotency-Key"
	headerEventID        = "Outbox-Event-Id"
	headerEventType      = "Outbox-Event-Type"
	headerAggregateType  = "Outbox-Aggregate-Type"
	headerAggregateID    = "Outbox-Aggregate-Id"
	headerAttempt        = "Outbox-Attempt"
	headerAggregateSeq   = "Outbox-Aggregate-Seq" // when the store numbered the event
	headerCompensates    = "Outbox-Compensates"   // on a compensating event: the expired event's id
	headerWebhookID      = "Webhook-Id"
	headerWebhookTime    = "Webhook-Timestamp"
	headerWebhookSig     = "Webhook-Signature"
)

// isReservedHeader reports whether name is a header the sink owns: one it
// sets itself, or one that belongs to the transport. Such headers cannot be
// configured in Config.Headers or carried over from an event's headers.
func isReservedHeader(name string) bool {
	k := http.CanonicalHeaderKey(name)
	switch k {
	case "Content-Type", "Content-Length", "Content-Encoding", "Transfer-Encoding",
		"Host", "Connection", "Te", "Trailer", "Upgrade", "Keep-Alive", "Proxy-Connection",
		"User-Agent", headerIdempotencyKey, headerWebhookID, headerWebhookTime, headerWebhookSig:
		return true
	}
	return strings.HasPrefix(k, "Outbox-")
}

// validHeaderName reports whether s is an HTTP field name (an RFC 9110 token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether s can be sent as a field value: valid
// UTF-8 without control characters other than tab.
func validHeaderValue(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// requestHeader builds the headers of one request, lowest precedence first:
// the event's own headers, then the configured static headers, then the
// headers the sink owns. Event headers that name a reserved or configured
// header are dropped. An event field that cannot travel in a header is an
// error (Enqueue rejects such events, so it means a corrupted row).
func (s *Sink) requestHeader(m *outbox.Message) (http.Header, error) {
	h := make(http.Header, len(m.Headers)+len(s.static)+10)
	for k, v := range m.Headers {
		if !validHeaderName(k) {
			return nil, fmt.Errorf("event header name %q is not a valid HTTP header name", k)
		}
		if !validHeaderValue(v) {
			return nil, fmt.Errorf("the value of event header %q contains a control character or invalid UTF-8", k)
		}
		ck := http.CanonicalHeaderKey(k)
		if _, configured := s.static[ck]; configured || isReservedHeader(ck) {
			continue
		}
		if s.cfg.Format.IsCloudEvents() && strings.HasPrefix(ck, "Ce-") {
			continue // the sink writes the CloudEvents attributes
		}
		h[ck] = []string{v}
	}
	for _, f := range [...]struct{ name, value string }{
		{"event_type", m.EventType}, {"aggregate_type", m.AggregateType}, {"aggregate_id", m.AggregateID},
	} {
		if !validHeaderValue(f.value) {
			return nil, fmt.Errorf("%s contains a control character or invalid UTF-8 and cannot be sent in a header", f.name)
		}
	}
	for k, v := range s.static {
		h[k] = []string{v} // a fresh slice: requests must not share one
	}
	id := m.EventID.String()
	h["Content-Type"] = []string{"application/json"}
	h["User-Agent"] = []string{s.cfg.UserAgent}
	h[headerIdempotencyKey] = []string{id}
	h[headerEventID] = []string{id}
	h[headerEventType] = []string{m.EventType}
	h[headerAggregateType] = []string{m.AggregateType}
	h[headerAggregateID] = []string{m.AggregateID}
	h[headerAttempt] = []string{strconv.Itoa(m.Attempt)}
	if m.AggregateSeq > 0 {
		h[headerAggregateSeq] = []string{strconv.FormatInt(m.AggregateSeq, 10)}
	}
	// The event's own outbox-compensates header (the store sets it on the
	// compensating event of an expired one) is passed on as the sink's own
	// header, since event headers named Outbox-* are not carried over; only
	// an event id is.
	if v, ok := m.Headers[outbox.HeaderCompensates]; ok {
		if _, err := outbox.ParseEventID(v); err == nil {
			h[headerCompensates] = []string{v}
		}
	}
	return h, nil
}
