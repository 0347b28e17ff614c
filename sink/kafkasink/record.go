package kafkasink

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
)

// recordBatchOverhead is the size of a v2 record batch header: base offset
// 8, length 4, leader epoch 4, magic 1, CRC 4, attributes 2, last offset
// delta 4, first and max timestamps 16, producer id 8, producer epoch 2,
// base sequence 4, record count 4.
const recordBatchOverhead = 61

// fillRecord sets r to the record of m: key = aggregate id, value =
// payload, headers = sink.BrokerHeaders (outbox-* first, then the event's
// own headers).
func fillRecord(r *kgo.Record, m *outbox.Message, topic string) {
	hs := sink.BrokerHeaders(m)
	headers := make([]kgo.RecordHeader, len(hs))
	for i, h := range hs {
		headers[i] = kgo.RecordHeader{Key: h[0], Value: []byte(h[1])}
	}
	*r = kgo.Record{
		Topic:   topic,
		Key:     []byte(m.AggregateID),
		Value:   m.Payload,
		Headers: headers,
	}
}

// recordBatchBytes is the size, before compression, of a record batch that
// holds m's record alone: what a broker compares with max.message.bytes.
func recordBatchBytes(m *outbox.Message) int {
	body := 1 + 1 + 1 // attributes, timestamp delta 0, offset delta 0
	body += varintLen(int64(len(m.AggregateID))) + len(m.AggregateID)
	body += varintLen(int64(len(m.Payload))) + len(m.Payload)
	hs := sink.BrokerHeaders(m)
	body += varintLen(int64(len(hs)))
	for _, h := range hs {
		body += varintLen(int64(len(h[0]))) + len(h[0])
		body += varintLen(int64(len(h[1]))) + len(h[1])
	}
	return recordBatchOverhead + varintLen(int64(body)) + body
}

// varintLen is the length of v as a zig-zag varint.
func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}
