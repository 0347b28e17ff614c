// Package benchkit runs the outbox benchmark of docs/BENCHMARKS.md: the same
// work, against the same PostgreSQL, for this project and for any other
// system plugged in through the small [System] interface (the bench/ module
// plugs in watermill-sql and River).
//
// The scenarios:
//
//   - drain: a backlog of N events over A aggregates is loaded as fast as
//     the system allows (not timed); then the time to deliver all of it to a
//     sink that only counts is measured, until the system also records every
//     event as done ([System.Pending] is 0). Median events/s of R runs.
//   - steady: P producers for D seconds, each transaction one business row
//     (bench_payments) plus one event, once with the system's relay running
//     and once without it; producer tx/s of both and their ratio.
//   - latency: a fixed offered load (paced producers, e.g. 200 and 1000
//     events/s); p50, p99 and p99.9 from "COMMIT returned" to "the sink saw
//     the event". The payload carries a sequence number that indexes the
//     commit time.
//
// Every system gets its own schema; tables are emptied and VACUUM ANALYZEd
// between runs, so that dead tuples of one run or system do not slow the
// next, and runs of different systems are interleaved. When the server's
// autovacuum is off, a stand-in ANALYZEs and VACUUMs at autovacuum's default
// thresholds during the steady and latency phases ([Config.NoAutovacuum]).
// [MeasureRelayMemory] samples the RSS of a relay running as a separate
// process, at steady state and over a long run.
package benchkit
