package benchkit_test

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/txoutbox/outbox/internal/benchkit"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink/discard"
	"github.com/txoutbox/outbox/store/postgres"
)

// relayChildEnv makes the test binary act as the relay process of
// TestRelayMemorySmoke: it delivers the outbox of the DSN in this variable
// to a discard sink until SIGTERM.
const relayChildEnv = "BENCHKIT_TEST_RELAY_DSN"

func TestMain(m *testing.M) {
	if dsn := os.Getenv(relayChildEnv); dsn != "" {
		os.Exit(relayChild(dsn))
	}
	goleak.VerifyTestMain(m)
}

func relayChild(dsn string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	s, err := postgres.Open(ctx, dsn, postgres.Config{})
	if err != nil {
		return 1
	}
	defer s.Close()
	r, err := relay.New(relay.Config{Store: s, Sink: discard.New(), PollInterval: 20 * time.Millisecond})
	if err != nil {
		return 1
	}
	if err := r.Run(ctx); err != nil {
		return 1
	}
	return 0
}

// TestRelayMemorySmoke runs the memory scenario at a tiny size with the
// test binary as the relay process.
func TestRelayMemorySmoke(t *testing.T) {
	t.Parallel()
	dsn := testenv.Postgres.Addr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := benchkit.MeasureRelayMemory(ctx, benchkit.MemoryConfig{
		DSN:       dsn,
		Schema:    "outbox_bench_test_memory_" + strconv.Itoa(os.Getpid()),
		Producers: 2,
		Duration:  300 * time.Millisecond,
		Events:    2000,
		Command: func(childDSN string) *exec.Cmd {
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), relayChildEnv+"="+childDSN)
			return cmd
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.SteadyRSS <= 0 || res.PeakRSS < res.SteadyRSS || res.LongEvents != 2000 || len(res.Long) == 0 {
		t.Errorf("unexpected result: %+v", res)
	}
	if last := res.Long[len(res.Long)-1]; last.Delivered < 2000 {
		t.Errorf("long run ended with %d of 2000 delivered", last.Delivered)
	}
}
