-- tx.database_file names the file of the main database ('' in memory).
{{define "tx.database_file"}}SELECT file FROM pragma_database_list WHERE name = 'main'{{end}}
