package sink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
)

// Receipt is what a destination answered to one message: the proof of a
// delivery (or of its refusal) that the relay keeps with the attempt. It
// says nothing secret: the destination is named without credentials or
// query, and an HTTP signature is the one sent on the wire.
//
// Exactly one of HTTP, Kafka, JetStream, AMQP and Redis is set, the one
// of Kind. A receipt is stored as its compact JSON ([Receipt.Encode]).
type Receipt struct {
	// Kind is the destination's kind: "http", "kafka", "jetstream",
	// "amqp" or "redis".
	Kind string `json:"kind"`
	// Destination is the URL (scheme, host and path), the topic, the
	// subject, the exchange and routing key, or the stream or channel.
	Destination string `json:"destination"`
	// AnsweredAt is when the sink had the answer, in the relay's clock.
	AnsweredAt time.Time `json:"answered_at"`

	HTTP      *HTTPReceipt      `json:"http,omitempty"`
	Kafka     *KafkaReceipt     `json:"kafka,omitempty"`
	JetStream *JetStreamReceipt `json:"jetstream,omitempty"`
	AMQP      *AMQPReceipt      `json:"amqp,omitempty"`
	Redis     *RedisReceipt     `json:"redis,omitempty"`
}

// HTTPReceipt is an HTTP endpoint's answer.
type HTTPReceipt struct {
	// Status is the response's status code, e.g. 200 or 503.
	Status int `json:"status"`
	// BodySHA256 is the SHA-256 (hex) of the response body as read: the
	// whole body up to BodyBytes; BodyTruncated when it was longer than
	// the sink reads (64 KiB).
	BodySHA256    string `json:"body_sha256"`
	BodyBytes     int    `json:"body_bytes"`
	BodyTruncated bool   `json:"body_truncated,omitempty"`
	// HeadersSHA256 is the SHA-256 (hex) of the response headers in the
	// canonical form of [HeadersDigest].
	HeadersSHA256 string `json:"headers_sha256"`
	// Signature, SignatureTimestamp and SignatureID are the
	// Webhook-Signature, Webhook-Timestamp and Webhook-Id headers the sink
	// sent, when it signs (a signing secret is configured).
	Signature          string `json:"signature,omitempty"`
	SignatureTimestamp string `json:"signature_timestamp,omitempty"`
	SignatureID        string `json:"signature_id,omitempty"`
}

// KafkaReceipt is a Kafka broker's acknowledgement of a record, or its
// refusal (Error, the broker's error code name, with no offset).
type KafkaReceipt struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Error     string `json:"error,omitempty"`
}

// JetStreamReceipt is a JetStream publish acknowledgement (Duplicate: the
// stream had the message id already and stored nothing), or the server's
// refusal (Error, its error code and description, with no sequence).
type JetStreamReceipt struct {
	Stream    string `json:"stream,omitempty"`
	Sequence  uint64 `json:"sequence,omitempty"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Error     string `json:"error,omitempty"`
}

// AMQPReceipt is a publisher confirm: Acked false is a nack. DeliveryTag
// numbers the publishes of one channel. Returned is the broker's reply
// code and text when it returned the message as unroutable.
type AMQPReceipt struct {
	Exchange    string `json:"exchange"`
	RoutingKey  string `json:"routing_key"`
	DeliveryTag uint64 `json:"delivery_tag"`
	Acked       bool   `json:"acked"`
	Returned    string `json:"returned,omitempty"`
}

// RedisReceipt is Redis's answer to an XADD: the stream entry id, or its
// error reply.
type RedisReceipt struct {
	EntryID string `json:"entry_id,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Encode returns the receipt as compact JSON.
func (r *Receipt) Encode() []byte {
	b, _ := json.Marshal(r) // strings, numbers, booleans and a time: it does not fail
	return b
}

// DecodeReceipt reads a receipt that Encode wrote.
func DecodeReceipt(b []byte) (*Receipt, error) {
	var r Receipt
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// HeadersDigest is the SHA-256 (hex) of HTTP headers in their canonical
// form: each header name in lower case, the names sorted by byte value;
// under each name, its values in the order received, one line each,
// "name:value\n", the value as received (no trimming, no folding). No
// header gives the digest of the empty string.
func HeadersDigest(h map[string][]string) string {
	names := make([]string, 0, len(h))
	lower := make(map[string][]string, len(h))
	for k, vs := range h {
		n := strings.ToLower(k)
		if _, seen := lower[n]; !seen {
			names = append(names, n)
		}
		lower[n] = append(lower[n], vs...)
	}
	slices.Sort(names)
	d := sha256.New()
	for _, n := range names {
		for _, v := range lower[n] {
			d.Write([]byte(n + ":" + v + "\n"))
		}
	}
	return hex.EncodeToString(d.Sum(nil))
}

// SHA256Hex is the SHA-256 of b in lower-case hex.
func SHA256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// ReceiptFunc receives the receipt of one message of a Publish call. m
// is the message as the sink received it (the relay finds it by its
// EventID).
type ReceiptFunc func(m *outbox.Message, r *Receipt)

type receiptFuncKey struct{}

// WithReceiptFunc returns a copy of ctx that carries f, for RecordReceipt.
func WithReceiptFunc(ctx context.Context, f ReceiptFunc) context.Context {
	return context.WithValue(ctx, receiptFuncKey{}, f)
}

// WantsReceipts reports whether ctx carries a ReceiptFunc: a sink may
// skip computing a receipt (digests) nobody records.
func WantsReceipts(ctx context.Context) bool {
	f, ok := ctx.Value(receiptFuncKey{}).(ReceiptFunc)
	return ok && f != nil
}

// RecordReceipt gives the receipt of m to the ReceiptFunc ctx carries, if
// any. A sink calls it once for each message the destination answered,
// whether the answer is an acknowledgement or a refusal (an HTTP 503 is a
// receipt too), and not for a message that got no answer. It may be
// called from any goroutine, before Publish returns.
func RecordReceipt(ctx context.Context, m *outbox.Message, r *Receipt) {
	if f, ok := ctx.Value(receiptFuncKey{}).(ReceiptFunc); ok && f != nil {
		f(m, r)
	}
}
