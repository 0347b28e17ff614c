-- store.notify wakes the relays that listen on channel $1 (the outbox
-- table's name); in a producer's transaction it fires at commit.
{{define "store.notify"}}SELECT pg_notify($1, ''){{end}}
