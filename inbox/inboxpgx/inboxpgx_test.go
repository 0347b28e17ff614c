package inboxpgx_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/inbox"
	"github.com/txoutbox/outbox/inbox/inboxpgx"
	"github.com/txoutbox/outbox/internal/testenv"
)

// fixture is an inbox and a business table of their own in PostgreSQL.
type fixture struct {
	pool    *pgxpool.Pool
	ib      *inboxpgx.Inbox
	effects string // a table with no unique key: a handler that ran twice leaves two rows
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testenv.Postgres.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	suffix := make([]byte, 5)
	_, _ = rand.Read(suffix)
	f := &fixture{pool: pool, effects: "effects_" + hex.EncodeToString(suffix)}
	f.ib, err = inboxpgx.New(pool, inbox.Config{Table: "ibpgx_" + hex.EncodeToString(suffix), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ib.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+f.effects+` (id BIGSERIAL PRIMARY KEY, event_id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tb := f.ib.Core().Tables()
		for _, name := range []string{tb.Sequences, tb.Inbox, tb.Migrations, f.effects} {
			_, _ = pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize())
		}
		f.ib.Close()
	})
	return f
}

func (f *fixture) insert(ctx context.Context, tx pgx.Tx, id string) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+f.effects+` (event_id) VALUES ($1)`, id)
	return err
}

func (f *fixture) count(t *testing.T, id string) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+f.effects+` WHERE event_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// handle runs Handle in a pgx transaction of its own; commit says whether
// to commit it.
func (f *fixture) handle(t *testing.T, id string, commit bool) inbox.Result {
	t.Helper()
	ctx := context.Background()
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	res, err := f.ib.Handle(ctx, tx, "billing", id, func(ctx context.Context) error { return f.insert(ctx, tx, id) })
	if err != nil {
		t.Fatal(err)
	}
	if commit {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return res
}

func TestHandle(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := outbox.NewEventID().String()
	if got := f.handle(t, id, false); got != inbox.Processed {
		t.Fatalf("first, rolled back: %s", got)
	}
	if got := f.handle(t, id, true); got != inbox.Processed {
		t.Fatalf("after a rollback: %s, want processed", got)
	}
	if got := f.handle(t, id, true); got != inbox.Duplicate {
		t.Fatalf("repeat: %s, want duplicate", got)
	}
	if n := f.count(t, id); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	ctx := context.Background()
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := f.ib.Handle(ctx, tx, "billing", "", func(context.Context) error { return nil }); !errors.Is(err, inbox.ErrNoEventID) {
		t.Fatalf("no id: %v", err)
	}
	if _, err := f.ib.Handle(ctx, nil, "billing", id, func(context.Context) error { return nil }); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Fatalf("nil tx: %v", err)
	}
}

// Eight pgx transactions with one event id at once: fn runs once.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := outbox.NewEventID().String()
	var ran, dups atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	start := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			<-start
			ctx := context.Background()
			tx, err := f.pool.Begin(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer tx.Rollback(ctx)
			res, err := f.ib.Handle(ctx, tx, "billing", id, func(ctx context.Context) error {
				ran.Add(1)
				return f.insert(ctx, tx, id)
			})
			if err == nil {
				err = tx.Commit(ctx)
			}
			if err != nil {
				errs <- err
			} else if res == inbox.Duplicate {
				dups.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if ran.Load() != 1 || dups.Load() != 7 || f.count(t, id) != 1 {
		t.Fatalf("fn ran %d times, %d duplicates, %d effects; want 1, 7, 1", ran.Load(), dups.Load(), f.count(t, id))
	}
}

// The middleware with pgx transactions replays a repeated key.
func TestMiddleware(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	mw, err := f.ib.Middleware(inbox.MiddlewareConfig{Consumer: "payments-api"})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := ran.Add(1)
		if err := f.insert(r.Context(), inboxpgx.Tx(r.Context()), r.Header.Get("Idempotency-Key")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"run":%d}`, n)
	})))
	defer srv.Close()
	for i, wantReplayed := range []string{"", "true"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		req.Header.Set("Idempotency-Key", "evt-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || string(body) != `{"run":1}` || resp.Header.Get("Idempotent-Replayed") != wantReplayed ||
			resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("request %d: %d %s %q", i, resp.StatusCode, body, resp.Header)
		}
	}
	if ran.Load() != 1 || f.count(t, "evt-1") != 1 {
		t.Fatalf("handler ran %d times, %d effects", ran.Load(), f.count(t, "evt-1"))
	}
}

func TestMissingTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testenv.Postgres.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ib, err := inboxpgx.New(pool, inbox.Config{Table: "never_migrated_inbox"})
	if err != nil {
		t.Fatal(err)
	}
	defer ib.Close()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := ib.Handle(ctx, tx, "billing", "evt-1", func(context.Context) error { return nil }); !errors.Is(err, inbox.ErrNotMigrated) {
		t.Fatalf("missing table: %v, want ErrNotMigrated", err)
	}
}
