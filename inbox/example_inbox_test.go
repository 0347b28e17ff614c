package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/txoutbox/outbox/inbox"
	"github.com/txoutbox/outbox/store/sqlite"
)

// A card service receives ChargeRequested events at least once: after a
// relay crash, the same event (the same event id) arrives again. The
// inbox records the id in the transaction that charges the card, so the
// second delivery charges nothing.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "inbox-example")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(dir, "cards.db")))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE charges (card TEXT NOT NULL, amount INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(db, inbox.Config{Table: "card_inbox"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := ib.MigrateUp(ctx); err != nil {
		log.Fatal(err)
	}

	// chargeCard is the consumer: one transaction per delivery.
	chargeCard := func(eventID, card string, amount int) (inbox.Result, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback()
		res, err := ib.Handle(ctx, tx, "card-charger", eventID, func(ctx context.Context) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO charges (card, amount) VALUES (?, ?)`, card, amount)
			return err
		})
		if err != nil {
			return 0, err
		}
		return res, tx.Commit()
	}

	// The outbox event id, as the Outbox-Event-Id header carries it. The
	// event is delivered twice.
	const eventID = "01964f5e-8a44-7cc1-9d36-8f7c2a1b0e11"
	for range 2 {
		res, err := chargeCard(eventID, "4111-xxxx-1111", 15000)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res)
	}
	var n, total int
	if err := db.QueryRow(`SELECT count(*), coalesce(sum(amount), 0) FROM charges`).Scan(&n, &total); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("charges: %d, total %d\n", n, total)
	fmt.Printf("duplicates dropped: %d\n", ib.Stats().Duplicates)
	// Output:
	// processed
	// duplicate
	// charges: 1, total 15000
	// duplicates dropped: 1
}
