package postgres

import (
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/sqlchain"
)

// AuditChain implements store.Store. Migration 15 made the chain and its
// triggers.
func (s *Store) AuditChain() store.AuditChain {
	return sqlchain.New(stdlib.OpenDBFromPool(s.pool), sqlDialect, sqlchain.Postgres, s.t, true)
}
