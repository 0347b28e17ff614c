// Package binlog reads the committed inserts into one table from a MySQL
// or MariaDB server's binary log, for the relay's binlog source
// (`outbox relay --source binlog`). It is the layer below that source: it
// checks the server's settings and streams ids; claiming and publishing
// are the relay's.
//
// [CheckServer] reports, in one error that wraps outbox.ErrInvalidConfig,
// every server setting or privilege that keeps a binlog reader from
// working (binary log off, binlog_format other than ROW, a
// binlog_row_image of MINIMAL, server_id 0, missing REPLICATION SLAVE or
// REPLICATION CLIENT / BINLOG MONITOR), each with the statement or
// option that fixes it.
//
// A [Reader] connects to the server as a replica (COM_BINLOG_DUMP, with a
// server id of its own, [Config.ServerID]) and a [Stream] it starts from
// a [Position] yields, per committed transaction that inserted rows into
// the configured table, the inserted rows' primary-key values in binlog
// order and the position just after that transaction's commit. The
// package guarantees that:
//
//   - only committed transactions are yielded (their XID event, or the
//     COMMIT query of a non-transactional table, has been read), each
//     once per stream, in commit order, with their ids in insertion order;
//   - inserts into any other table, updates and deletes are skipped;
//   - positions follow binary log rotations (FLUSH BINARY LOGS, a restart,
//     max_binlog_size), so a new stream started from a yielded position
//     yields exactly the transactions committed after it;
//   - a start position the server no longer has (purged, or a file that
//     never existed) ends the stream with an error matching
//     [ErrPositionPurged];
//   - errors and logs never contain the DSN's password.
//
// Transactions that inserted nothing into the table are not yielded, so
// a position only moves on when the table gets rows. The table must have
// a single-column integer primary key (the outbox table's id).
//
// The server needs log_bin ON, binlog_format=ROW, binlog_row_image FULL
// (or NOBLOB), a nonzero server_id, and a user with REPLICATION SLAVE and
// REPLICATION CLIENT (MariaDB 10.5+: BINLOG MONITOR).
package binlog
