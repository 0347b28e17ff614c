package inboxpgx

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/inbox"
)

// Inbox is an inbox.Inbox whose consumers use pgx transactions.
type Inbox struct {
	pool *pgxpool.Pool
	db   *sql.DB // on the pool: for migrations and cleanup
	core *inbox.Inbox
}

// New returns an inbox on pool. cfg.Dialect is set to PostgreSQL. Close
// releases what New opened; the pool stays open.
func New(pool *pgxpool.Pool, cfg inbox.Config) (*Inbox, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: inboxpgx.New needs the consumer's *pgxpool.Pool, got nil", outbox.ErrInvalidConfig)
	}
	cfg.Dialect = inbox.PostgreSQL
	db := stdlib.OpenDBFromPool(pool)
	core, err := inbox.New(db, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Inbox{pool: pool, db: db, core: core}, nil
}

// Close releases the database/sql handle New opened on the pool. It does
// not close the pool.
func (ib *Inbox) Close() error { return ib.db.Close() }

// Core returns the inbox.Inbox underneath, for what does not depend on
// the transaction type.
func (ib *Inbox) Core() *inbox.Inbox { return ib.core }

// Handle is inbox.Inbox.Handle for a pgx transaction: fn runs in tx at
// most once per (consumer, eventID) among the transactions that commit.
func (ib *Inbox) Handle(ctx context.Context, tx pgx.Tx, consumer, eventID string, fn func(context.Context) error) (inbox.Result, error) {
	return ib.HandleMessage(ctx, tx, consumer, inbox.Message{EventID: eventID}, fn)
}

// HandleMessage is inbox.Inbox.HandleMessage for a pgx transaction.
func (ib *Inbox) HandleMessage(ctx context.Context, tx pgx.Tx, consumer string, m inbox.Message, fn func(context.Context) error) (inbox.Result, error) {
	if tx == nil {
		return 0, fmt.Errorf("%w: inboxpgx.Handle needs the consumer's transaction, got nil", outbox.ErrInvalidConfig)
	}
	return ib.core.HandleIn(ctx, Querier(tx), consumer, m, fn)
}

// Middleware is inbox.Inbox.Middleware with pgx transactions from the
// pool: the handler gets its transaction with Tx(r.Context()).
// cfg.Begin is set.
func (ib *Inbox) Middleware(cfg inbox.MiddlewareConfig) (func(http.Handler) http.Handler, error) {
	cfg.Begin = func(ctx context.Context) (context.Context, inbox.Tx, error) {
		tx, err := ib.pool.Begin(ctx)
		if err != nil {
			return ctx, nil, err
		}
		return context.WithValue(ctx, txKey{}, tx), pgxTx{querier{tx}}, nil
	}
	return ib.core.Middleware(cfg)
}

type txKey struct{}

// Tx returns the transaction Middleware began for the request whose
// context is ctx, or nil outside the middleware.
func Tx(ctx context.Context) pgx.Tx {
	tx, _ := ctx.Value(txKey{}).(pgx.Tx)
	return tx
}

// MigrateUp creates the inbox tables or brings them up to date.
func (ib *Inbox) MigrateUp(ctx context.Context) ([]int64, error) { return ib.core.MigrateUp(ctx) }

// MigrateDown drops the inbox tables.
func (ib *Inbox) MigrateDown(ctx context.Context) error { return ib.core.MigrateDown(ctx) }

// Cleanup deletes event ids older than the retention: see
// inbox.Inbox.Cleanup.
func (ib *Inbox) Cleanup(ctx context.Context) (inbox.CleanupResult, error) {
	return ib.core.Cleanup(ctx)
}

// Stats returns the inbox's counters.
func (ib *Inbox) Stats() inbox.Stats { return ib.core.Stats() }

// Querier adapts a pgx transaction to inbox.Querier.
func Querier(tx pgx.Tx) inbox.Querier { return querier{tx} }

type querier struct{ tx pgx.Tx }

func (q querier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := q.tx.Exec(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (q querier) QueryRow(ctx context.Context, query string, args ...any) inbox.Row {
	return q.tx.QueryRow(ctx, query, args...)
}

type pgxTx struct{ querier }

func (t pgxTx) Commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t pgxTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }
