package kafkasink_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// uniquePrefix names this test's topics, so that no two tests (or reruns)
// share one.
func uniquePrefix(t testing.TB) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, t.Name())
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	return "t-" + strings.Trim(name, "-") + "-" + hex.EncodeToString(b)
}

// cluster is an in-process Kafka (kfake) that can be restarted on the
// same port with its data kept, like a broker process with a log dir.
type cluster struct {
	t     testing.TB
	opts  []kfake.Opt
	dir   string
	port  int
	kfake *kfake.Cluster
}

// newCluster starts a one-broker cluster with persistence in a temporary
// directory; opts add topics and broker configs.
func newCluster(t testing.TB, opts ...kfake.Opt) *cluster {
	t.Helper()
	c := &cluster{t: t, opts: opts, dir: t.TempDir()}
	// A port below the kernel's ephemeral range, which no client socket is
	// given while the broker is down for a restart.
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	c.port = port
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.kfake != nil {
			c.kfake.Close()
		}
	})
	return c
}

func (c *cluster) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)) }

func (c *cluster) start(ctx context.Context) error {
	opts := append([]kfake.Opt{kfake.NumBrokers(1), kfake.DataDir(c.dir)}, c.opts...)
	if c.port != 0 {
		opts = append(opts, kfake.Ports(c.port))
	}
	var err error
	for {
		var k *kfake.Cluster
		if k, err = kfake.NewCluster(opts...); err == nil {
			c.kfake = k
			_, port, _ := net.SplitHostPort(k.ListenAddrs()[0])
			c.port, _ = strconv.Atoi(port)
			return nil
		}
		// The port may linger briefly after a close: wait and try again.
		tick := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			tick.Stop()
			return fmt.Errorf("restart kfake on port %d: %w (last error: %v)", c.port, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// restart stops the broker and starts it again on the same port, with
// its data.
func (c *cluster) restart(ctx context.Context) error {
	c.stop()
	return c.start(ctx)
}

// stop stops the broker; start brings it back on the same port.
func (c *cluster) stop() {
	c.kfake.Close()
	c.kfake = nil
}

// reader consumes topics from the start, keeps everything it read, and
// can tell when it has read everything written so far.
type reader struct {
	t      testing.TB
	topics []string
	cl     *kgo.Client
	adm    *kadm.Client
	got    []sinktest.Received
	recs   []*kgo.Record
	ids    map[string]bool            // distinct event ids read (records without one count once each)
	next   map[string]map[int32]int64 // topic -> partition -> next offset to read
}

func newReader(t testing.TB, addr string, topics ...string) *reader {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addr),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &reader{t: t, topics: topics, cl: cl, adm: kadm.NewClient(cl), ids: map[string]bool{}, next: map[string]map[int32]int64{}}
}

// poll reads one round of fetches (or waits for one until ctx ends).
func (r *reader) poll(ctx context.Context) error {
	fs := r.cl.PollFetches(ctx)
	if err := ctx.Err(); err != nil {
		return err
	}
	fs.EachRecord(func(rec *kgo.Record) {
		got := received(rec)
		r.got = append(r.got, got)
		id := got.EventID
		if id == "" { // a record the sink did not write: count each one
			id = fmt.Sprintf("%s/%d/%d", rec.Topic, rec.Partition, rec.Offset)
		}
		r.ids[id] = true
		r.recs = append(r.recs, rec)
		if r.next[rec.Topic] == nil {
			r.next[rec.Topic] = map[int32]int64{}
		}
		r.next[rec.Topic][rec.Partition] = rec.Offset + 1
	})
	return nil
}

// caughtUp reports whether every record written so far was read.
func (r *reader) caughtUp(ctx context.Context) (bool, error) {
	ends, err := r.adm.ListEndOffsets(ctx, r.topics...)
	if err != nil {
		return false, err
	}
	up := true
	for _, topic := range r.topics {
		if len(ends[topic]) == 0 { // not listed (yet): nothing says it was read
			up = false
		}
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			err = o.Err
		}
		if o.Offset > r.next[o.Topic][o.Partition] {
			up = false
		}
	})
	return up, err
}

// read waits until records of at least n distinct events arrived and
// everything written so far was read, or ctx ends; it returns all records
// read, in order. (Counting records rather than events, a reader that
// had read a few hundred repeats could stop short of events it had not
// read yet, should the end offsets it compares with miss a partition.)
func (r *reader) read(ctx context.Context, n int) ([]sinktest.Received, error) {
	for {
		up, err := r.caughtUp(ctx)
		if err == nil && up && len(r.ids) >= n {
			return r.got, nil
		}
		if ctx.Err() != nil {
			return r.got, fmt.Errorf("read %d records of %d distinct events, want %d events: %w (last error: %v)", len(r.got), len(r.ids), n, ctx.Err(), err)
		}
		if up || err != nil {
			// Nothing more to read yet: wait for a fetch (it returns
			// when records arrive, or after FetchMaxWait).
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			_ = r.poll(pctx)
			cancel()
			continue
		}
		if err := r.poll(ctx); err != nil {
			return r.got, err
		}
	}
}

// raw returns the records read so far.
func (r *reader) raw() []*kgo.Record { return r.recs }

// received maps a record and its outbox-* headers.
func received(rec *kgo.Record) sinktest.Received {
	h := make(map[string]string, len(rec.Headers))
	for _, kv := range rec.Headers {
		h[kv.Key] = string(kv.Value)
	}
	return sinktest.Received{
		EventID:       h[sink.HeaderEventID],
		AggregateType: h[sink.HeaderAggregateType],
		AggregateID:   h[sink.HeaderAggregateID],
		EventType:     h[sink.HeaderEventType],
		Headers:       h,
		Payload:       rec.Value,
		Destination:   rec.Topic,
	}
}
