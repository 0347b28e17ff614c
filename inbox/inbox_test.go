package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/inbox"
)

// A second delivery of an event id does not run fn; the first does, once.
// Two consumers of one event each handle it once.
func TestDuplicateSkipped(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ib := newInbox(t, b, inbox.Config{})
		e := newEffects(t, b)
		m := inbox.Message{EventID: outbox.NewEventID().String()}
		if got := handle(t, ib, e, "billing", m); got != inbox.Processed {
			t.Fatalf("first delivery: %s, want processed", got)
		}
		for range 3 {
			if got := handle(t, ib, e, "billing", m); got != inbox.Duplicate {
				t.Fatalf("repeated delivery: %s, want duplicate", got)
			}
		}
		if got := handle(t, ib, e, "ledger", m); got != inbox.Processed {
			t.Fatalf("the same event for another consumer: %s, want processed", got)
		}
		if n := e.count(t, m.EventID); n != 2 {
			t.Fatalf("%d effects, want 2 (one per consumer)", n)
		}
		st := ib.Stats()
		if st.Processed != 2 || st.Duplicates != 3 || st.Failed != 0 {
			t.Fatalf("stats %+v, want 2 processed, 3 duplicates", st)
		}
		// Ids are compared exactly: case and trailing spaces make another id.
		for _, id := range []string{strings.ToUpper(m.EventID), m.EventID + " "} {
			if got := handle(t, ib, e, "billing", inbox.Message{EventID: id}); got != inbox.Processed {
				t.Fatalf("id %q: %s, want processed (a different id)", id, got)
			}
		}
	})
}

// A consumer transaction that rolls back takes its record with it: the
// redelivery is handled. fn's error comes back as it is.
func TestRollbackForgetsTheID(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ib := newInbox(t, b, inbox.Config{})
		e := newEffects(t, b)
		ctx := context.Background()
		id := outbox.NewEventID().String()

		// The transaction rolls back after a successful fn.
		tx, err := b.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := ib.Handle(ctx, tx, "billing", id, func(ctx context.Context) error { return e.insert(ctx, tx, id, 1) })
		if err != nil || res != inbox.Processed {
			t.Fatalf("Handle: %s, %v", res, err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		// fn fails: Handle returns its error, the caller rolls back.
		declined := errors.New("card declined")
		tx, err = b.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ib.Handle(ctx, tx, "billing", id, func(ctx context.Context) error {
			if err := e.insert(ctx, tx, id, 1); err != nil {
				return err
			}
			return declined
		})
		if err != declined {
			t.Fatalf("Handle returned %v, want fn's error unchanged", err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if n := recorded(t, b, ib); n != 0 {
			t.Fatalf("%d ids recorded after two rollbacks, want 0", n)
		}
		if got := handle(t, ib, e, "billing", inbox.Message{EventID: id}); got != inbox.Processed {
			t.Fatalf("redelivery after the rollbacks: %s, want processed", got)
		}
		if n := e.count(t, id); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
		if st := ib.Stats(); st.Failed != 1 {
			t.Fatalf("stats %+v, want 1 failed", st)
		}
	})
}

// Two transactions get the same event at once. The second waits for the
// first's row (or write) lock; when the first commits, the second reports
// Duplicate without running fn; when the first rolls back, the second runs
// fn. Then eight at once: exactly one runs fn.
func TestConcurrentDelivery(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ib := newInbox(t, b, inbox.Config{})
		e := newEffects(t, b)
		for _, firstCommits := range []bool{true, false} {
			id := outbox.NewEventID().String()
			ctx := context.Background()
			inFn, release := make(chan struct{}), make(chan struct{})
			releaseOnce := sync.OnceFunc(func() { close(release) })
			defer releaseOnce() // also when the test fails early
			first := make(chan error, 1)
			go func() {
				tx, err := b.db.BeginTx(ctx, nil)
				if err != nil {
					close(inFn)
					first <- err
					return
				}
				_, err = ib.Handle(ctx, tx, "billing", id, func(ctx context.Context) error {
					close(inFn)
					<-release
					return e.insert(ctx, tx, id, 1)
				})
				if err == nil && firstCommits {
					err = tx.Commit()
				} else {
					_ = tx.Rollback()
				}
				first <- err
			}()
			<-inFn

			type outcome struct {
				res inbox.Result
				ran bool
				err error
			}
			second := make(chan outcome, 1)
			go func() {
				tx, err := b.db.BeginTx(ctx, nil)
				if err != nil {
					second <- outcome{err: err}
					return
				}
				defer tx.Rollback()
				var o outcome
				o.res, o.err = ib.Handle(ctx, tx, "billing", id, func(ctx context.Context) error {
					o.ran = true
					return e.insert(ctx, tx, id, 1)
				})
				if o.err == nil {
					o.err = tx.Commit()
				}
				second <- o
			}()
			waitBlocked(t, b, ib.Tables().Inbox)
			select {
			case o := <-second:
				t.Fatalf("the second delivery finished (%+v) while the first was still running", o)
			default:
			}
			releaseOnce()
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			o := <-second
			if o.err != nil {
				t.Fatal(o.err)
			}
			want, wantRan := inbox.Duplicate, false
			if !firstCommits {
				want, wantRan = inbox.Processed, true
			}
			if o.res != want || o.ran != wantRan {
				t.Fatalf("first commits=%v: the second got %s (fn ran: %v), want %s (fn ran: %v)", firstCommits, o.res, o.ran, want, wantRan)
			}
			if n := e.count(t, id); n != 1 {
				t.Fatalf("first commits=%v: %d effects, want 1", firstCommits, n)
			}
		}

		// Eight deliveries of one event at once.
		id := outbox.NewEventID().String()
		var ran, dups atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() {
				<-start
				ctx := context.Background()
				tx, err := b.db.BeginTx(ctx, nil)
				if err != nil {
					errs <- err
					return
				}
				defer tx.Rollback()
				res, err := ib.Handle(ctx, tx, "stress", id, func(ctx context.Context) error {
					ran.Add(1)
					return e.insert(ctx, tx, id, 1)
				})
				if err == nil {
					err = tx.Commit()
				}
				if err != nil {
					errs <- err
					return
				}
				if res == inbox.Duplicate {
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
		if ran.Load() != 1 || dups.Load() != 7 || e.count(t, id) != 1 {
			t.Fatalf("8 concurrent deliveries: fn ran %d times, %d duplicates, %d effects; want 1, 7, 1", ran.Load(), dups.Load(), e.count(t, id))
		}
	})
}

// Without the inbox tables, Handle says which migration to run.
func TestMissingTable(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ib, err := inbox.New(b.db, inbox.Config{Table: uniqueName("never_migrated"), Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		tx, err := b.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		ran := false
		_, err = ib.Handle(ctx, tx, "billing", "evt-1", func(context.Context) error { ran = true; return nil })
		if !errors.Is(err, inbox.ErrNotMigrated) || !strings.Contains(err.Error(), "MigrateUp") || !strings.Contains(err.Error(), ib.Tables().Inbox) {
			t.Fatalf("Handle on a missing table: %v; want ErrNotMigrated naming the table and MigrateUp", err)
		}
		if ran {
			t.Fatal("fn ran although nothing could be recorded")
		}
	})
}

// Bad input gets a clear error, and nothing is recorded or run.
func TestBadInput(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ib := newInbox(t, b, inbox.Config{})
		ctx := context.Background()
		ok := func(context.Context) error { t.Error("fn ran for bad input"); return nil }
		cases := []struct {
			name     string
			consumer string
			m        inbox.Message
			fn       func(context.Context) error
			is       error
			says     string
		}{
			{"no event id", "billing", inbox.Message{}, ok, inbox.ErrNoEventID, "no event id"},
			{"long id", "billing", inbox.Message{EventID: strings.Repeat("x", 256)}, ok, inbox.ErrInvalidMessage, "at most 255"},
			{"control character", "billing", inbox.Message{EventID: "evt\n1"}, ok, inbox.ErrInvalidMessage, "control character"},
			{"invalid UTF-8", "billing", inbox.Message{EventID: "evt\xff"}, ok, inbox.ErrInvalidMessage, "UTF-8"},
			{"sequence without aggregate", "billing", inbox.Message{EventID: "evt-1", Seq: 3}, ok, inbox.ErrInvalidMessage, "no aggregate"},
			{"negative sequence", "billing", inbox.Message{EventID: "evt-1", AggregateType: "payment", AggregateID: "tx-1", Seq: -1}, ok, inbox.ErrInvalidMessage, "negative"},
			{"no consumer", "", inbox.Message{EventID: "evt-1"}, ok, inbox.ErrInvalidMessage, "consumer name is empty"},
			{"no fn", "billing", inbox.Message{EventID: "evt-1"}, nil, outbox.ErrInvalidConfig, "function"},
		}
		for _, c := range cases {
			tx, err := b.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = ib.HandleMessage(ctx, tx, c.consumer, c.m, c.fn)
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("%s: %v; want %v saying %q", c.name, err, c.is, c.says)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := ib.Handle(ctx, nil, "billing", "evt-1", ok); !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("nil transaction: %v", err)
		}
		if n := recorded(t, b, ib); n != 0 {
			t.Fatalf("%d ids recorded for bad input, want 0", n)
		}
	})
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []struct {
		cfg  inbox.Config
		says string
	}{
		{inbox.Config{Table: "x; drop table payments"}, "not allowed"},
		{inbox.Config{Table: "Inbox"}, "not allowed"},
		{inbox.Config{Table: "1inbox"}, "not allowed"},
		{inbox.Config{Table: strings.Repeat("a", inbox.MaxTableLen+1)}, "at most 45"},
		{inbox.Config{Retention: -1}, "negative"},
		{inbox.Config{SequenceRetention: -1}, "negative"},
		{inbox.Config{CleanupBatch: -1}, "negative"},
		{inbox.Config{Dialect: 9}, "unknown Dialect"},
	} {
		if _, err := inbox.New(db, c.cfg); !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("New(%+v): %v; want ErrInvalidConfig saying %q", c.cfg, err, c.says)
		}
	}
	if _, err := inbox.New(nil, inbox.Config{}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("New(nil): %v", err)
	}
	for _, ok := range []string{"", "_inbox", "payment_inbox_2", strings.Repeat("a", inbox.MaxTableLen)} {
		if _, err := inbox.New(db, inbox.Config{Table: ok}); err != nil {
			t.Errorf("table %q: %v", ok, err)
		}
	}
}

// Migrations are idempotent, and up, down, up leaves a working inbox.
func TestMigrateUpDownUp(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ib := newInbox(t, b, inbox.Config{})
		e := newEffects(t, b)
		ctx := context.Background()
		if applied, err := ib.MigrateUp(ctx); err != nil || len(applied) != 0 {
			t.Fatalf("second MigrateUp: applied %v, %v; want nothing", applied, err)
		}
		if cur, latest, err := ib.MigrationVersion(ctx); err != nil || cur != latest || cur < 1 {
			t.Fatalf("version %d of %d, %v", cur, latest, err)
		}
		handle(t, ib, e, "billing", inbox.Message{EventID: "evt-1", AggregateType: "payment", AggregateID: "tx-1", Seq: 1})
		if err := ib.MigrateDown(ctx); err != nil {
			t.Fatal(err)
		}
		tx, err := b.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ib.Handle(ctx, tx, "billing", "evt-1", func(context.Context) error { return nil })
		_ = tx.Rollback()
		if !errors.Is(err, inbox.ErrNotMigrated) {
			t.Fatalf("Handle after MigrateDown: %v, want ErrNotMigrated", err)
		}
		if applied, err := ib.MigrateUp(ctx); err != nil || len(applied) == 0 {
			t.Fatalf("MigrateUp after down: applied %v, %v", applied, err)
		}
		if got := handle(t, ib, e, "billing", inbox.Message{EventID: "evt-1", AggregateType: "payment", AggregateID: "tx-1", Seq: 1}); got != inbox.Processed {
			t.Fatalf("after down and up: %s, want processed (the tables were recreated empty)", got)
		}
	})
}

// At REPEATABLE READ, PostgreSQL ends the waiting second delivery with a
// serialization failure (it cannot see the row that conflicts); its retry
// reports Duplicate. MySQL reports Duplicate at READ COMMITTED as at its
// default REPEATABLE READ (TestConcurrentDelivery).
func TestConcurrentDeliveryIsolation(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		level := map[inbox.Dialect]sql.IsolationLevel{inbox.PostgreSQL: sql.LevelRepeatableRead, inbox.MySQL: sql.LevelReadCommitted}[b.dialect]
		if level == 0 {
			t.Skip("SQLite has one isolation level")
		}
		ib := newInbox(t, b, inbox.Config{})
		ctx := context.Background()
		first, err := b.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer first.Rollback()
		if _, err := ib.Handle(ctx, first, "billing", "evt-1", func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		second, err := b.db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
		if err != nil {
			t.Fatal(err)
		}
		defer second.Rollback()
		// The snapshot of a REPEATABLE READ transaction starts at its first
		// statement: before the first commits.
		if _, err := second.ExecContext(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		type outcome struct {
			res inbox.Result
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			res, err := ib.Handle(ctx, second, "billing", "evt-1", func(context.Context) error { return errors.New("fn ran twice") })
			done <- outcome{res, err}
		}()
		waitBlocked(t, b, ib.Tables().Inbox)
		if err := first.Commit(); err != nil {
			t.Fatal(err)
		}
		o := <-done
		if b.dialect == inbox.PostgreSQL {
			if o.err == nil || !strings.Contains(o.err.Error(), "40001") {
				t.Fatalf("REPEATABLE READ: %s, %v; want a serialization failure (40001)", o.res, o.err)
			}
			_ = second.Rollback()
			retry, err := b.db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
			if err != nil {
				t.Fatal(err)
			}
			defer retry.Rollback()
			o.res, o.err = ib.Handle(ctx, retry, "billing", "evt-1", func(context.Context) error { return errors.New("fn ran twice") })
		}
		if o.err != nil || o.res != inbox.Duplicate {
			t.Fatalf("%s: %s, %v; want duplicate", level, o.res, o.err)
		}
	})
}
