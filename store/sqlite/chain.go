package sqlite

import (
	"crypto/sha256"
	"database/sql/driver"
	"encoding/hex"
	"fmt"

	"modernc.org/sqlite"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/sqlchain"
)

// AuditChain implements store.Store. Migration 11 made the chain and its
// triggers, which call outbox_sha256.
func (s *Store) AuditChain() store.AuditChain {
	return sqlchain.New(s.db, sqlDialect, sqlchain.SQLite, s.t, false)
}

// SQLite has no SHA-256 of its own: outbox_sha256(text) is the lower-case
// hex SHA-256 of the text's UTF-8 bytes (NULL for NULL), registered for
// every connection this process opens. The chain's triggers call it, so a
// program without it (the sqlite3 shell) cannot insert into the attempts
// table, the route log or the audit log; producers never do.
func init() {
	err := sqlite.RegisterDeterministicScalarFunction("outbox_sha256", 1,
		func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
			var b []byte
			switch v := args[0].(type) {
			case nil:
				return nil, nil
			case string:
				b = []byte(v)
			case []byte:
				b = v
			default:
				b = []byte(fmt.Sprint(v))
			}
			sum := sha256.Sum256(b)
			return hex.EncodeToString(sum[:]), nil
		})
	if err != nil {
		panic("store/sqlite: register outbox_sha256: " + err.Error())
	}
}
