package inboxkafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/outbox/inbox/inboxkafka"
	"github.com/txoutbox/outbox/inbox/internal/paidtwice"
	"github.com/txoutbox/outbox/internal/testenv"
)

// TestPaidTwiceKafka: the real relay delivers a backlog of payment and
// merchant events to Kafka (kfake); a franz-go consumer charges a card
// (one row) per record through the inbox, in its own PostgreSQL
// transaction. The relay is SIGKILLed mid-batch several times, so records
// are produced again; every event is charged exactly once, and the inbox
// counted each repeat.
func TestPaidTwiceKafka(t *testing.T) {
	t.Parallel()
	n, kills := 2000, 3
	if testenv.Short() {
		n, kills = 400, 2
	}
	f := paidtwice.New(t, "inbox_kafka_e2e", n)
	topics := []string{"payment.events", "merchant.events"}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topics...))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]

	// The deadline bounds a hang: on a loaded machine the kills, the drain
	// and one consumer transaction per delivery take minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	consumed := make(chan map[string]map[int32]int64, 1) // what the consumer read, once it stops
	var deliveries int64
	consumerCtx, stopConsumer := context.WithCancel(ctx)
	consumerErr := make(chan error, 1)
	next := map[string]map[int32]int64{}
	go func() {
		defer func() { consumed <- next }()
		for {
			fs := cl.PollFetches(consumerCtx)
			if consumerCtx.Err() != nil {
				consumerErr <- nil
				return
			}
			for _, rec := range fs.Records() {
				if err := charge(ctx, f, rec); err != nil {
					consumerErr <- err
					return
				}
				deliveries++
				if next[rec.Topic] == nil {
					next[rec.Topic] = map[int32]int64{}
				}
				next[rec.Topic][rec.Partition] = rec.Offset + 1
			}
		}
	}()

	f.Run(ctx, "kafka://"+addr, kills)

	// The relay is done: let the consumer read up to the end of every
	// partition, then stop it.
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	var produced int64
	ends.Each(func(o kadm.ListedOffset) { produced += o.Offset })
	waitCharged := time.NewTicker(5 * time.Millisecond)
	defer waitCharged.Stop()
	for f.Inbox.Stats().Processed+f.Inbox.Stats().Duplicates < produced {
		select {
		case err := <-consumerErr:
			t.Fatalf("the consumer stopped: %v", err)
		case <-ctx.Done():
			t.Fatalf("the consumer handled %d of %d records: %v", f.Inbox.Stats().Processed+f.Inbox.Stats().Duplicates, produced, ctx.Err())
		case <-waitCharged.C:
		}
	}
	stopConsumer()
	if err := <-consumerErr; err != nil {
		t.Fatal(err)
	}
	read := <-consumed
	ends.Each(func(o kadm.ListedOffset) {
		if read[o.Topic][o.Partition] != o.Offset {
			t.Errorf("%s/%d: the consumer read up to offset %d of %d", o.Topic, o.Partition, read[o.Topic][o.Partition], o.Offset)
		}
	})
	f.Check(ctx, "Kafka", deliveries)
}

// charge is the consumer: one transaction per record, the charge made
// through the inbox.
func charge(ctx context.Context, f *paidtwice.Fixture, rec *kgo.Record) error {
	m, err := inboxkafka.FromRecord(rec)
	if err != nil {
		return err
	}
	tx, err := f.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := f.Inbox.HandleMessage(ctx, tx, "ledger", m, func(ctx context.Context) error {
		return f.Charge(ctx, tx, m.EventID)
	}); err != nil {
		return err
	}
	return tx.Commit()
}
