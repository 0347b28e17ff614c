-- tx.database_file names the file of the main database ('' in memory).
{{define "tx.database_file"}}SELECT file FROM pragma_database_list WHERE name = 'main'{{end}}

-- The transactions: BEGIN IMMEDIATE takes the write lock at once (the
-- writers' transactions), BEGIN DEFERRED at the first write (the reads).
{{define "tx.begin_immediate"}}BEGIN IMMEDIATE{{end}}

{{define "tx.begin_deferred"}}BEGIN DEFERRED{{end}}

{{define "tx.commit"}}COMMIT{{end}}

{{define "tx.rollback"}}ROLLBACK{{end}}

-- tx.busy_timeout reads how long the connection waits for the write lock,
-- and tx.set_busy_timeout sets it to MS milliseconds.
{{define "tx.busy_timeout"}}PRAGMA busy_timeout{{end}}

{{define "tx.set_busy_timeout"}}PRAGMA busy_timeout = {{.MS}}{{end}}
