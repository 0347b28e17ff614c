package kafkasink

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

// recordBatchOverhead is the size of a v2 record batch header: base offset
// 8, length 4, leader epoch 4, magic 1, CRC 4, attributes 2, last offset
// delta 4, first and max timestamps 16, producer id 8, producer epoch 2,
// base sequence 4, record count 4.
const recordBatchOverhead = 61

// Header names of the formats other than native.
const (
	headerContentType = "content-type" // the Kafka binding's datacontenttype
	headerCEPrefix    = "ce_"          // CloudEvents attributes, binary mode
	headerDebeziumID  = "id"           // Debezium's outbox event router: the event id
)

// fillRecord sets r to the record of m in the sink's format. In every
// format the key is the aggregate id and the outbox-* headers and the
// event's own headers (traceparent, ...) are carried; native and
// debezium records carry the payload as the value. The formats add:
//
//	cloudevents             ce_specversion, ce_id, ce_source, ce_type, ce_subject,
//	                        ce_time, ce_aggregatetype, ce_sequence, ce_traceparent,
//	                        content-type: application/json
//	cloudevents-structured  content-type: application/cloudevents+json, the
//	                        CloudEvent in JSON as the value
//	debezium                id: the event id, first
//
// An event header that would be read as one of these is dropped.
func (s *Sink) fillRecord(r *kgo.Record, m *outbox.Message, topic string) error {
	hs := sinkkit.BrokerHeaders(m)
	headers := make([]kgo.RecordHeader, 0, len(hs)+10)
	value := []byte(m.Payload)
	switch s.cfg.Format {
	case sinkkit.FormatDebezium:
		headers = append(headers, kgo.RecordHeader{Key: headerDebeziumID, Value: []byte(m.EventID.String())})
	case sinkkit.FormatCloudEvents:
		for _, a := range sinkkit.CloudEventAttributes(m, s.cfg.Source) {
			headers = append(headers, kgo.RecordHeader{Key: headerCEPrefix + a.Name, Value: []byte(a.Value)})
		}
		headers = append(headers, kgo.RecordHeader{Key: headerContentType, Value: []byte("application/json")})
	case sinkkit.FormatCloudEventsStructured:
		var err error
		if value, err = sinkkit.CloudEventJSON(m, s.cfg.Source); err != nil {
			return err
		}
		headers = append(headers, kgo.RecordHeader{Key: headerContentType, Value: []byte(sinkkit.CloudEventsJSON)})
	}
	for _, h := range hs {
		if s.cfg.Format != sinkkit.FormatNative && s.shadows(h[0]) {
			continue
		}
		headers = append(headers, kgo.RecordHeader{Key: h[0], Value: []byte(h[1])})
	}
	*r = kgo.Record{
		Topic:   topic,
		Key:     []byte(m.AggregateID),
		Value:   value,
		Headers: headers,
	}
	return nil
}

// shadows reports whether an event header named k would be taken for a
// header of the sink's format.
func (s *Sink) shadows(k string) bool {
	k = strings.ToLower(k)
	switch s.cfg.Format {
	case sinkkit.FormatDebezium:
		return k == headerDebeziumID
	case sinkkit.FormatCloudEvents, sinkkit.FormatCloudEventsStructured:
		return k == headerContentType || strings.HasPrefix(k, headerCEPrefix)
	}
	return false
}

// recordBatchBytes is the size, before compression, of a record batch that
// holds r alone: what a broker compares with max.message.bytes.
func recordBatchBytes(r *kgo.Record) int {
	body := 1 + 1 + 1 // attributes, timestamp delta 0, offset delta 0
	body += varintLen(int64(len(r.Key))) + len(r.Key)
	body += varintLen(int64(len(r.Value))) + len(r.Value)
	body += varintLen(int64(len(r.Headers)))
	for _, h := range r.Headers {
		body += varintLen(int64(len(h.Key))) + len(h.Key)
		body += varintLen(int64(len(h.Value))) + len(h.Value)
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
