package sqlite

import (
	"embed"

	"github.com/txoutbox/outbox/internal/sqltext"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// sqlStatements are the named statements of sql/*.sql, parsed once.
var sqlStatements = sqltext.MustParseFS(sqlFiles, "sql/*.sql")
