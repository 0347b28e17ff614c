package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/outbox/sink"
)

// The demo's Kafka topics: the kafka sink's default topic,
// {aggregate_type}.events.
var kafkaTopics = []string{"payment.events", "merchant.events"}

// Kafka is an in-process Kafka-protocol broker (kfake) on a fixed port of
// 127.0.0.1, with its data in a folder, so that it can be stopped and
// started again on the same port with its records (an outage), and a
// consumer that reads the demo's topics from the start and checks, per
// aggregate, the order of what it reads.
type Kafka struct {
	port int
	dir  string

	mu      sync.Mutex
	cluster *kfake.Cluster
	down    bool

	consumer *kgo.Client
	cancel   context.CancelFunc
	done     chan struct{}

	recMu      sync.Mutex
	received   map[string]KafkaRecord // by event id: the first read
	order      []string
	repeats    int
	lastSeq    map[string]int // by topic/aggregate
	violations []Violation
	byTopic    map[string]int // distinct events by topic
	byType     map[string]int // distinct events by event type
}

// KafkaRecord is an event the consumer read for the first time.
type KafkaRecord struct {
	EventID, Topic, AggregateType, AggregateID, EventType string
	Seq                                                   int // -1: none (a compensating event)
	At                                                    time.Time
}

// StartKafka starts the broker on a free port of 127.0.0.1, with the
// demo's topics, and its consumer.
func StartKafka() (*Kafka, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("kafka: find a free port on 127.0.0.1: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	dir, err := os.MkdirTemp("", "outbox-demo-kafka-")
	if err != nil {
		return nil, fmt.Errorf("kafka: make a folder for the broker's data: %w", err)
	}
	k := &Kafka{port: port, dir: dir, received: map[string]KafkaRecord{}, lastSeq: map[string]int{}, byTopic: map[string]int{}, byType: map[string]int{}}
	if err := k.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr()), kgo.ConsumeTopics(kafkaTopics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		k.Close()
		return nil, fmt.Errorf("kafka: start the demo's consumer: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	k.consumer, k.cancel, k.done = cl, cancel, make(chan struct{})
	go k.consume(ctx)
	return k, nil
}

// Addr is the broker's host:port.
func (k *Kafka) Addr() string { return fmt.Sprintf("127.0.0.1:%d", k.port) }

// Start starts the broker on its port with its data (again, after Stop).
// The port may linger a moment after a stop: it is tried for 10 s.
func (k *Kafka) Start() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(k.port), kfake.DataDir(k.dir),
			kfake.SeedTopics(3, kafkaTopics...))
		if err == nil {
			k.cluster, k.down = c, false
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kafka: start the in-process broker on %s: %w (is the port taken by another program?)", k.Addr(), err)
		}
		t := time.NewTimer(20 * time.Millisecond)
		<-t.C
	}
}

// Stop stops the broker: producers and the consumer lose it until Start.
func (k *Kafka) Stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cluster != nil {
		k.cluster.Close()
		k.cluster, k.down = nil, true
	}
}

// IsDown reports whether the broker is stopped.
func (k *Kafka) IsDown() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.down
}

// Close stops the consumer and the broker and removes its data.
func (k *Kafka) Close() {
	if k.cancel != nil {
		k.cancel()
		<-k.done
		k.consumer.Close()
	}
	k.Stop()
	_ = os.RemoveAll(k.dir)
}

// consume reads the topics until ctx ends.
func (k *Kafka) consume(ctx context.Context) {
	defer close(k.done)
	for ctx.Err() == nil {
		fs := k.consumer.PollFetches(ctx)
		fs.EachRecord(k.record)
	}
}

// record files one record: the first read of an event id, or a repeat.
func (k *Kafka) record(r *kgo.Record) {
	hdr := map[string]string{}
	for _, h := range r.Headers {
		hdr[h.Key] = string(h.Value)
	}
	rec := KafkaRecord{EventID: hdr[sink.HeaderEventID], Topic: r.Topic, AggregateType: hdr[sink.HeaderAggregateType],
		AggregateID: string(r.Key), EventType: hdr[sink.HeaderEventType], Seq: -1, At: time.Now()}
	var p payload
	if err := json.Unmarshal(r.Value, &p); err == nil && p.Seq != nil && p.ExpiredEventID == "" {
		rec.Seq = *p.Seq
	}
	k.recMu.Lock()
	defer k.recMu.Unlock()
	if _, seen := k.received[rec.EventID]; seen {
		k.repeats++ // at least once: a repeat after a produce whose answer was lost
		return
	}
	k.received[rec.EventID] = rec
	k.order = append(k.order, rec.EventID)
	k.byTopic[rec.Topic]++
	k.byType[rec.EventType]++
	if rec.Seq < 0 {
		return // a compensating event: outside the aggregate's sequence
	}
	agg := rec.Topic + "/" + rec.AggregateID
	if last, ok := k.lastSeq[agg]; ok && rec.Seq <= last {
		k.violations = append(k.violations, Violation{Aggregate: agg, EventID: rec.EventID, Seq: rec.Seq, After: last})
		return
	}
	k.lastSeq[agg] = rec.Seq
}

// KafkaReport is a snapshot of what the consumer read.
type KafkaReport struct {
	Received   map[string]KafkaRecord // by event id: the first read
	Repeats    int                    // records repeating an event read before
	Violations []Violation
	ByTopic    map[string]int // distinct events by topic
	ByType     map[string]int // distinct events by event type
}

// Report returns a copy of what the consumer has read so far.
func (k *Kafka) Report() KafkaReport {
	k.recMu.Lock()
	defer k.recMu.Unlock()
	r := KafkaReport{Received: make(map[string]KafkaRecord, len(k.received)), Repeats: k.repeats,
		Violations: append([]Violation(nil), k.violations...), ByTopic: map[string]int{}, ByType: map[string]int{}}
	for id, rec := range k.received {
		r.Received[id] = rec
	}
	for t, n := range k.byTopic {
		r.ByTopic[t] = n
	}
	for t, n := range k.byType {
		r.ByType[t] = n
	}
	return r
}

// Count returns the number of distinct events read, cheaply.
func (k *Kafka) Count() int {
	k.recMu.Lock()
	defer k.recMu.Unlock()
	return len(k.received)
}

// Missing returns those of ids the consumer has not read, in order.
func (k *Kafka) Missing(ids []string) []string {
	k.recMu.Lock()
	defer k.recMu.Unlock()
	var out []string
	for _, id := range ids {
		if _, ok := k.received[id]; !ok {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}
