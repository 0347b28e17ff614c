// Package cdc is the relay's PostgreSQL logical replication source
// (`outbox relay --source logical`): the write-ahead log, not a scan of the
// table, tells the relay which events were committed.
//
// A [Source] wraps a [postgres.Store] and is the relay's store.Store. Its
// Listen takes the stream lease (one relay per slot streams, the others
// stand by) and streams the outbox table's committed inserts from a
// logical slot with the pgoutput plugin; its Claim claims the streamed ids
// by primary key under the ordinary claim's per-aggregate rules, and runs
// the ordinary claim every Config.PollInterval as the safety net for what
// the stream hands back (retries, events held behind an earlier one of
// their aggregate). Publishing, recording, retries, dead letters, expiry
// and the audit trail are the relay's and the PostgreSQL store's,
// unchanged.
//
// The slot is confirmed past a transaction only once each of its events is
// final or back in the table's hands, so a crash resumes from the
// confirmed position and loses nothing; when nothing streamed is
// unsettled, keepalives move the slot on, so an idle outbox holds no WAL.
//
//	st, _ := postgres.Open(ctx, dsn, postgres.Config{})
//	src, err := cdc.New(ctx, st, cdc.Config{}) // checks wal_level, privilege, primary key; creates slot and publication
//	r, _ := relay.New(relay.Config{Store: src, Sink: sk})
//	err = r.Run(ctx)
//
// The stream runs in Listen, which the relay calls unless
// relay.Config.NoListen is set: do not set it with a Source.
//
// See docs/CDC.md for the PostgreSQL settings, failover and slot hygiene.
package cdc
