package cdc_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/internal/testenv/pgtest"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/postgres/cdc"
	"github.com/txoutbox/outbox/store/storetest"
)

// TestMain checks for leaked goroutines and stops the private cluster
// LogicalPostgres may have started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(&stopCluster{m})
}

type stopCluster struct{ m *testing.M }

func (s *stopCluster) Run() int {
	code := s.m.Run()
	testenv.StopLogicalPostgres()
	return code
}

// harness is one test's outbox on a PostgreSQL with wal_level=logical:
// its own table, slot and publication, all dropped at the end.
type harness struct {
	dsn              string
	pool             *pgxpool.Pool
	store            *postgres.Store
	table, slot, pub string
}

func newHarness(t testing.TB) *harness {
	return newHarnessOn(t, testenv.LogicalPostgres(t))
}

func newHarnessOn(t testing.TB, dsn string) *harness {
	t.Helper()
	ctx := context.Background()
	pool := newPool(t, dsn)
	table := storetest.TableName("cdc")
	st, err := postgres.New(pool, postgres.Config{Table: table, NoNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	h := &harness{dsn: dsn, pool: pool, store: st, table: table, slot: table + "_slot", pub: table + "_publication"}
	t.Cleanup(func() { h.drop(t) })
	return h
}

func newPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 12
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// drop ends any walsender on the slot, then drops the slot, the
// publication and the tables.
func (h *harness) drop(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		var active bool
		err := h.pool.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, h.slot).Scan(&active)
		if err != nil || !active {
			break
		}
		_, _ = h.pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active`, h.slot)
		waitCtx(ctx, 20*time.Millisecond)
	}
	if err := cdc.Drop(ctx, h.pool, h.slot, h.pub); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	if _, err := h.pool.Exec(ctx, pgtest.DropTables(h.table)); err != nil {
		t.Errorf("cleanup: %v", err)
	}
}

// waitCtx waits d or until ctx ends (the pause between two looks at a
// condition).
func waitCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// eventually waits up to d for cond, looking every 20ms.
// A last argument, when given, describes the state for the failure message.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool, state ...func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for !cond() {
		if ctx.Err() != nil {
			extra := ""
			for _, s := range state {
				extra += ": " + s()
			}
			t.Fatalf("timed out after %s waiting for %s%s", d, what, extra)
		}
		waitCtx(ctx, 20*time.Millisecond)
	}
}

// currentLSN returns the server's WAL position now.
func (h *harness) currentLSN(t testing.TB) string {
	t.Helper()
	var lsn string
	if err := h.pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}

// waitSlotPast waits up to d for the slot's confirmed position to reach
// lsn, and prints both positions if it does not. Past the last commit the
// slot moves only with the server's keepalives, which come once the
// walsender has caught up with the WAL written since: with other tests
// writing WAL to the same server, that can take more than 10 s.
func (h *harness) waitSlotPast(t testing.TB, d time.Duration, lsn string) {
	t.Helper()
	eventually(t, d, "the slot's confirmed position to pass "+lsn, func() bool {
		var passed bool
		err := h.pool.QueryRow(context.Background(), `SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, h.slot, lsn).Scan(&passed)
		return err == nil && passed
	}, func() string {
		confirmed, current := h.slotPositions()
		return fmt.Sprintf("confirmed %s (server now at %s)", confirmed, current)
	})
}

// slotPositions returns the slot's confirmed position and the server's WAL
// position now, for failure messages (empty if they cannot be read).
func (h *harness) slotPositions() (confirmed, current string) {
	_ = h.pool.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text, pg_current_wal_lsn()::text FROM pg_replication_slots WHERE slot_name = $1`, h.slot).Scan(&confirmed, &current)
	return confirmed, current
}

// progress describes where a stream stands, for a wait's failure message:
// the rows by status, what the source streamed and claimed, and the slot's
// confirmed position against the server's.
func (h *harness) progress(t testing.TB, src *cdc.Source, delivered int) string {
	confirmed, current := h.slotPositions()
	return fmt.Sprintf("processed %d, pending %d, processing %d; delivered %d; streamed %d, %d claimed by the stream, %d by the safety-net poll; streaming %v; slot confirmed %s (server now at %s)",
		h.count(t, outbox.StatusProcessed), h.count(t, outbox.StatusPending), h.count(t, outbox.StatusProcessing),
		delivered, src.Streamed(), src.ClaimedByStream(), src.ClaimedByPoll(), src.Streaming(), confirmed, current)
}

func (h *harness) source(t testing.TB, cfg cdc.Config) *cdc.Source {
	t.Helper()
	cfg.Slot, cfg.Publication = h.slot, h.pub
	if cfg.StatusInterval == 0 {
		cfg.StatusInterval = 50 * time.Millisecond
	}
	if cfg.Lease == 0 {
		cfg.Lease = 2 * time.Second
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Hour // the stream alone, unless a test asks
	}
	src, err := cdc.New(context.Background(), h.store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// runRelay runs a relay on src into sk until the test ends (or stop is
// called); it returns stop.
func runRelay(t *testing.T, src *cdc.Source, sk sink.Sink, cfg relay.Config) (r *relay.Relay, stop func()) {
	t.Helper()
	cfg.Store, cfg.Sink = src, sk
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Hour
	}
	if cfg.Lease == 0 {
		cfg.Lease = 10 * time.Second
	}
	if cfg.BackoffMin == 0 {
		cfg.BackoffMin, cfg.BackoffMax = 50*time.Millisecond, 200*time.Millisecond
	}
	cfg.SweepInterval = 200 * time.Millisecond
	r, err := relay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	}
	t.Cleanup(stop)
	return r, stop
}

// enqueue commits one transaction with n events of aggregate agg.
func (h *harness) enqueue(t testing.TB, agg string, n int) {
	t.Helper()
	ctx := context.Background()
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	evs := make([]outbox.Event, n)
	for i := range evs {
		evs[i] = outbox.Event{AggregateType: "payment", AggregateID: agg, EventType: "Charged", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	if _, err := h.store.Enqueue(ctx, tx, evs...); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// count counts the outbox rows in status.
func (h *harness) count(t testing.TB, status outbox.Status) int {
	t.Helper()
	var n int
	if err := h.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM %q WHERE status = $1`, h.table), string(status)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func cdcConfig() cdc.Config { return cdc.Config{} }

// quietLogger drops the relay's INFO lines (benchmarks).
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
