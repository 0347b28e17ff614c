package benchkit

import (
	"strconv"
)

// PayloadSize is the size of every event payload, in bytes.
const PayloadSize = 100

// NewEvent returns the event with sequence number seq: aggregate
// "pay-<seq mod aggregates>" and a PayloadSize-byte JSON payload that
// starts with {"seq":seq,.
func NewEvent(seq int64, aggregates int) Event {
	agg := "pay-" + strconv.Itoa(int(seq%int64(max(aggregates, 1))))
	b := make([]byte, 0, PayloadSize)
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, seq, 10)
	b = append(b, `,"payment":"`...)
	b = append(b, agg...)
	b = append(b, `","amount":`...)
	b = strconv.AppendInt(b, 1000+seq%9000, 10)
	b = append(b, `,"currency":"EUR","note":"`...)
	for len(b) < PayloadSize-2 {
		b = append(b, 'x')
	}
	b = append(b, `"}`...)
	return Event{Aggregate: agg, Payload: b}
}

// Seq returns the sequence number at the start of a payload written by
// NewEvent, or -1 if there is none. It accepts a space after the colon, as
// PostgreSQL's jsonb prints it (jsonb also puts the shortest key, "seq",
// first).
func Seq(payload []byte) int64 {
	const prefix = `{"seq":`
	if len(payload) <= len(prefix) || string(payload[:len(prefix)]) != prefix {
		return -1
	}
	i := len(prefix)
	for i < len(payload) && payload[i] == ' ' {
		i++
	}
	start := i
	var n int64
	for ; i < len(payload) && payload[i] >= '0' && payload[i] <= '9'; i++ {
		n = n*10 + int64(payload[i]-'0')
	}
	if i == start {
		return -1
	}
	return n
}
