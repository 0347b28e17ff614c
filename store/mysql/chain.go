package mysql

import (
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/sqlchain"
)

// AuditChain implements store.Store. Migration 12 made the chain and its
// triggers.
func (s *Store) AuditChain() store.AuditChain {
	return sqlchain.New(s.db, sqlDialect, sqlchain.MySQL, s.t, false)
}
