package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/txoutbox/outbox/internal/benchkit"
)

// River is River tuned as its own benchmark tunes it
// (riverqueue/river, cmd/river/riverbench/river_bench.go): FetchCooldown
// 2ms, FetchPollInterval 20ms, MaxWorkers 2,000 on the default queue, bulk
// insert with InsertManyFast (COPY). Producers insert one job with InsertTx
// in their transaction; a worker that only counts works it.
type River struct {
	MaxWorkers        int
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration

	schema   string
	pool     *pgxpool.Pool
	driver   *riverpgxv5.Driver
	inserter *river.Client[pgx.Tx]
	env      benchkit.Env
}

// eventArgs carries the event payload as the job's args, byte for byte.
type eventArgs struct{ payload json.RawMessage }

func (eventArgs) Kind() string                   { return "bench_event" }
func (a eventArgs) MarshalJSON() ([]byte, error) { return a.payload, nil }
func (a *eventArgs) UnmarshalJSON(b []byte) error {
	a.payload = append(a.payload[:0], b...)
	return nil
}

type countingWorker struct {
	river.WorkerDefaults[eventArgs]
	sink benchkit.Sink
}

func (w *countingWorker) Work(_ context.Context, j *river.Job[eventArgs]) error {
	w.sink([][]byte{j.EncodedArgs})
	return nil
}

func (*River) Name() string { return "river" }

func (r *River) Setup(ctx context.Context, env benchkit.Env) error {
	if r.MaxWorkers == 0 {
		r.MaxWorkers = 2000
	}
	if r.FetchCooldown == 0 {
		r.FetchCooldown = 2 * time.Millisecond
	}
	if r.FetchPollInterval == 0 {
		r.FetchPollInterval = 20 * time.Millisecond
	}
	pool, err := env.NewPool(ctx, 8)
	if err != nil {
		return err
	}
	r.pool, r.env, r.schema = pool, env, env.Schema
	r.driver = riverpgxv5.New(pool)
	m, err := rivermigrate.New(r.driver, &rivermigrate.Config{Schema: r.schema, Logger: env.Logger})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	r.inserter, err = river.NewClient(r.driver, &river.Config{Schema: r.schema, Logger: env.Logger})
	return err
}

func (r *River) Produce(ctx context.Context, tx pgx.Tx, ev benchkit.Event) error {
	_, err := r.inserter.InsertTx(ctx, tx, eventArgs{ev.Payload}, nil)
	return err
}

// Load inserts 5,000 jobs per InsertManyFast (COPY), as River's benchmark does.
func (r *River) Load(ctx context.Context, events []benchkit.Event) error {
	const chunk = 5000
	params := make([]river.InsertManyParams, 0, chunk)
	for start := 0; start < len(events); start += chunk {
		params = params[:0]
		for _, ev := range events[start:min(start+chunk, len(events))] {
			params = append(params, river.InsertManyParams{Args: eventArgs{ev.Payload}})
		}
		if _, err := r.inserter.InsertManyFast(ctx, params); err != nil {
			return err
		}
	}
	return nil
}

func (r *River) StartRelay(ctx context.Context, sink benchkit.Sink) (func() error, error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, &countingWorker{sink: sink})
	client, err := river.NewClient(r.driver, &river.Config{
		Schema:            r.schema,
		FetchCooldown:     r.FetchCooldown,
		FetchPollInterval: r.FetchPollInterval,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: r.MaxWorkers}},
		Workers:           workers,
		Logger:            r.env.Logger,
	})
	if err != nil {
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	return func() error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		return client.Stop(sctx)
	}, nil
}

func (r *River) Pending(ctx context.Context) (int64, error) {
	var n int64
	err := r.pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{r.schema, "river_job"}.Sanitize()+
		` WHERE state NOT IN ('completed', 'cancelled', 'discarded')`).Scan(&n)
	return n, err
}

func (r *River) Reset(ctx context.Context) error {
	_, err := r.pool.Exec(ctx, `TRUNCATE `+pgx.Identifier{r.schema, "river_job"}.Sanitize())
	return err
}

func (r *River) Teardown(context.Context) error {
	if r.pool != nil {
		r.pool.Close()
	}
	return nil
}
