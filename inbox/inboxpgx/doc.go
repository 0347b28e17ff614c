// Package inboxpgx is the inbox for consumers that use pgx v5
// transactions (pgx.Tx) on PostgreSQL: the same tables, guarantees and
// statements as package inbox with database/sql, through a pgxpool.Pool.
//
//	ib, err := inboxpgx.New(pool, inbox.Config{Table: "billing_inbox"})
//	...
//	res, err := ib.Handle(ctx, tx, "billing", eventID, func(ctx context.Context) error {
//		_, err := tx.Exec(ctx, `INSERT INTO charges ...`)
//		return err
//	})
//
// See package inbox for what Handle guarantees.
package inboxpgx
