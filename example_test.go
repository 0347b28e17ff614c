package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store/sqlite"
)

// A payment row and its ApprovalRequested event are written in one
// transaction: the event exists if and only if the payment does. The QR code
// the payment came from lives 66 seconds, so the event carries that TTL and
// is never sent after it.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "outbox-example")
	defer os.RemoveAll(dir)

	db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(dir, "app.db")))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE payments (id TEXT PRIMARY KEY, amount INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	ob, err := sqlite.New(db, sqlite.Config{Table: "payment_outbox"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := ob.MigrateUp(ctx); err != nil {
		log.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO payments (id, amount) VALUES ('tx-1001', 15000)`); err != nil {
		log.Fatal(err)
	}
	ids, err := outbox.Enqueue(ctx, ob, tx, outbox.Event{
		AggregateType: "payment",
		AggregateID:   "tx-1001",
		EventType:     "ApprovalRequested",
		Payload:       []byte(`{"transaction_no":"tx-1001","amount":15000}`),
		TTL:           66 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	ev, err := ob.GetEvent(ctx, ids[0])
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ev.AggregateType, ev.AggregateID, ev.EventType, ev.Status)
	fmt.Println("deadline after", ev.ExpiresAt.Sub(ev.CreatedAt).Round(time.Second))
	// Output:
	// payment tx-1001 ApprovalRequested PENDING
	// deadline after 1m6s
}
