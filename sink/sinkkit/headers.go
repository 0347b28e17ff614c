package sinkkit

import (
	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"strconv"
)

// BrokerHeaders returns the outbox-* headers of m followed by the event's
// own headers (which cannot override the outbox-* ones), as ordered pairs.
func BrokerHeaders(m *outbox.Message) [][2]string {
	out := make([][2]string, 0, 5+len(m.Headers))
	out = append(out,
		[2]string{sink.HeaderEventID, m.EventID.String()},
		[2]string{sink.HeaderEventType, m.EventType},
		[2]string{sink.HeaderAggregateType, m.AggregateType},
		[2]string{sink.HeaderAggregateID, m.AggregateID},
		[2]string{sink.HeaderAttempt, strconv.Itoa(m.Attempt)},
	)
	for k, v := range m.Headers {
		switch k {
		case sink.HeaderEventID, sink.HeaderEventType, sink.HeaderAggregateType, sink.HeaderAggregateID, sink.HeaderAttempt:
			continue
		}
		out = append(out, [2]string{k, v})
	}
	return out
}
