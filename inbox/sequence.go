package inbox

import (
	"context"
	"fmt"
)

// SequenceIssueKind says what is wrong with a message's sequence.
type SequenceIssueKind int

const (
	// Gap: the message's sequence is more than one above the highest seen
	// for its aggregate, so the messages in between have not arrived (yet).
	// For the first message the inbox sees of an aggregate, "the highest
	// seen" is 0: a first message other than 1 is a gap.
	Gap SequenceIssueKind = iota + 1
	// Reorder: the message's sequence is not above the highest seen: it
	// arrived after a later event of its aggregate (a late or swapped
	// message, or one redelivered after its id left the retention window).
	// Duplicates of a recorded id are not reorders: they are dropped before
	// the sequence is looked at.
	Reorder
)

func (k SequenceIssueKind) String() string {
	switch k {
	case Gap:
		return "gap"
	case Reorder:
		return "reorder"
	}
	return "none"
}

// SequenceIssue is a gap or a reordering in the events of one aggregate,
// as one consumer received them.
//
// The producer numbers the events of each (aggregate_type, aggregate_id)
// 1, 2, 3 ... without gaps (the outbox's aggregate_seq, carried as the
// outbox-aggregate-seq header), and the relay delivers them in that order.
// The inbox keeps, per consumer and aggregate, the highest sequence it has
// handled, in the consumer's transaction: a message that does not continue
// it is reported through Config.OnSequence, the log and Stats, and then
// handled as usual (the inbox reports, it does not hold messages back).
// A report made in a transaction that rolls back may be made again when
// the message is redelivered.
type SequenceIssue struct {
	Kind          SequenceIssueKind
	Consumer      string
	AggregateType string
	AggregateID   string
	EventID       string
	// Seq is the message's sequence; Last the highest seen before it (0:
	// none).
	Seq, Last int64
}

// Missing is the number of sequence numbers a Gap skipped (0 for a
// Reorder).
func (s SequenceIssue) Missing() int64 {
	if s.Kind != Gap {
		return 0
	}
	return s.Seq - s.Last - 1
}

func (s SequenceIssue) String() string {
	agg := s.AggregateType + "/" + s.AggregateID
	if s.Kind == Gap {
		return fmt.Sprintf("%s: %s: sequence %d after %d: %d missing (event %s)", s.Consumer, agg, s.Seq, s.Last, s.Missing(), s.EventID)
	}
	return fmt.Sprintf("%s: %s: sequence %d arrived after %d (event %s)", s.Consumer, agg, s.Seq, s.Last, s.EventID)
}

// checkSequence moves the aggregate's highest sequence to m.Seq (if
// higher) in q's transaction and reports a gap or a reordering. The upsert
// locks the aggregate's row, so consumers of one aggregate that run at
// once are serialized from here to their commit.
func (ib *Inbox) checkSequence(ctx context.Context, q Querier, consumer string, m Message) error {
	var last int64
	if ib.q.sequenceRead == "" {
		if err := q.QueryRow(ctx, ib.q.sequence, consumer, m.AggregateType, m.AggregateID, m.Seq).Scan(&last); err != nil {
			return ib.wrap("check the sequence of "+m.AggregateType+"/"+m.AggregateID, err)
		}
	} else {
		if _, err := q.Exec(ctx, ib.q.sequence, consumer, m.AggregateType, m.AggregateID, m.Seq, m.Seq); err != nil {
			return ib.wrap("check the sequence of "+m.AggregateType+"/"+m.AggregateID, err)
		}
		if err := q.QueryRow(ctx, ib.q.sequenceRead, consumer, m.AggregateType, m.AggregateID).Scan(&last); err != nil {
			return ib.wrap("read the sequence of "+m.AggregateType+"/"+m.AggregateID, err)
		}
	}
	issue := SequenceIssue{Consumer: consumer, AggregateType: m.AggregateType, AggregateID: m.AggregateID, EventID: m.EventID, Seq: m.Seq, Last: last}
	switch {
	case m.Seq == last+1:
		return nil
	case m.Seq > last+1:
		issue.Kind = Gap
		ib.stats.gaps.Add(1)
	default:
		issue.Kind = Reorder
		ib.stats.reorders.Add(1)
	}
	ib.cfg.Logger.WarnContext(ctx, "inbox: sequence "+issue.Kind.String(), "consumer", consumer,
		"aggregate_type", m.AggregateType, "aggregate_id", m.AggregateID, "event_id", m.EventID, "seq", m.Seq, "last_seq", last)
	if ib.cfg.OnSequence != nil {
		ib.cfg.OnSequence(ctx, issue)
	}
	return nil
}
