package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/txoutbox/outbox/store"
)

// Only a refusal of a row's own values is store.ErrRefused: a NOT NULL
// or CHECK constraint, a type mismatch. A read-only database and a
// conflict with another row are not: the relay retries them, and never
// ends an event FAILED for them.
func TestRefusedDataIsOnlyAboutValues(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "refused.db")
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL CHECK (v <> 'bad'), n INTEGER) STRICT`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO t (id, v) VALUES (1, 'ok')`); err != nil {
		t.Fatal(err)
	}
	ro, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	for _, c := range []struct {
		name    string
		db      *sql.DB
		stmt    string
		refused bool
	}{
		{"not null", db, `INSERT INTO t (id, v) VALUES (2, NULL)`, true},
		{"check", db, `INSERT INTO t (id, v) VALUES (3, 'bad')`, true},
		{"type mismatch", db, `INSERT INTO t (id, v, n) VALUES (4, 'ok', 'x')`, true},
		{"another row's key", db, `INSERT INTO t (id, v) VALUES (1, 'ok')`, false},
		{"read-only database", ro, `INSERT INTO t (id, v) VALUES (5, 'ok')`, false},
	} {
		_, err := c.db.ExecContext(ctx, c.stmt)
		if err == nil {
			t.Errorf("%s: %s succeeded", c.name, c.stmt)
			continue
		}
		if got := errors.Is(refusedData(err), store.ErrRefused); got != c.refused {
			t.Errorf("%s: %v: refused %v, want %v", c.name, err, got, c.refused)
		}
	}
}
