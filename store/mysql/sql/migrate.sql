-- migrate.columns_of lists the columns of table ? in the connection's
-- database, with whether each is nullable, in order.
{{define "migrate.columns_of"}}SELECT column_name, is_nullable FROM information_schema.columns
WHERE table_schema = DATABASE() AND table_name = ? ORDER BY ordinal_position{{end}}

-- migrate.table_exists counts the tables named ? in the connection's database.
{{define "migrate.table_exists"}}SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?{{end}}
