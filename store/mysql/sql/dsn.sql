-- dsn.isolation makes a session READ COMMITTED (the connector runs it on
-- every new connection). It works on MySQL 5.7/8 and on every MariaDB,
-- unlike the session variables, whose names differ.
{{define "dsn.isolation"}}SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED{{end}}
