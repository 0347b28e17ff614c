package kafkasink

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

// permanentKafkaErrors are broker answers that retrying the same record
// cannot fix. Every other Kafka error, and every connection error and
// timeout, is retryable.
var permanentKafkaErrors = []*kerr.Error{
	kerr.MessageTooLarge,
	kerr.RecordListTooLarge,
	kerr.InvalidTopicException,
	kerr.UnknownTopicOrPartition, // returned only after UnknownTopicRetries metadata loads
	kerr.UnknownTopicID,
	kerr.TopicAuthorizationFailed,
	kerr.ClusterAuthorizationFailed,
	kerr.TransactionalIDAuthorizationFailed,
	kerr.InvalidRecord,
	kerr.InvalidRequiredAcks,
	kerr.InvalidTimestamp,
	kerr.PolicyViolation,
	kerr.UnsupportedForMessageFormat,
	kerr.UnsupportedCompressionType,
}

// classify turns a franz-go produce error into an outbox error for the
// message m sent to topic.
func (s *Sink) classify(m *outbox.Message, topic string, err error) error {
	prefix := fmt.Sprintf("kafka sink: event %s to topic %s", m.EventID, topic)
	var ke *kerr.Error
	switch {
	case errors.Is(err, kgo.ErrClientClosed):
		return precheck.NotSent(m, sinkkit.ReasonClosed, outbox.ErrClosed)
	case errors.Is(err, kerr.MessageTooLarge):
		return outbox.Permanent(fmt.Errorf("%s: the broker refused the message as too large on its own "+
			"(%d bytes as a record batch): raise the topic's max.message.bytes, or shrink the event: %w",
			prefix, s.recordBytes(m, topic), err))
	case errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID):
		return outbox.Permanent(fmt.Errorf("%s: the topic does not exist and the sink does not create topics: "+
			"create it (or route the aggregate type elsewhere with --route), then requeue the event: %w", prefix, err))
	case errors.As(err, &ke) && isPermanentKafka(ke):
		return outbox.Permanent(fmt.Errorf("%s: %w", prefix, err))
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kgo.ErrRecordTimeout):
		return outbox.Retryable(fmt.Errorf("%s: no acknowledgement within the produce timeout (%s) or the publish deadline; "+
			"is a broker down? the message may still be written: %w", prefix, s.cfg.ProduceTimeout, err), 0)
	case errors.Is(err, context.Canceled):
		return outbox.Retryable(fmt.Errorf("%s: interrupted: the publish context was cancelled: %w", prefix, err), 0)
	}
	return outbox.Retryable(fmt.Errorf("%s: %w", prefix, err), 0)
}

func isPermanentKafka(ke *kerr.Error) bool {
	for _, p := range permanentKafkaErrors {
		if ke == p {
			return true
		}
	}
	return false
}

// recordBytes is the size of m's record alone, as recordBatchBytes counts it.
func (s *Sink) recordBytes(m *outbox.Message, topic string) int {
	var r kgo.Record
	if err := s.fillRecord(&r, m, topic); err != nil {
		return 0
	}
	return recordBatchBytes(&r)
}
