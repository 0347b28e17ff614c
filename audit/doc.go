// Package audit verifies the tamper-evident audit trail of an outbox.
//
// The trail is the attempts table (every attempt that is not a delivery
// recorded on the event, and every operator action on an event), the route
// log (every breaker change, by a relay or by hand), the history (each
// finished event with its delivery, as it moves out of the hot table) and
// the audit log (anchors, retention runs, key shredding, operators'
// notes). The schema chains each of
// these records as it is inserted, in the inserting transaction (see
// store.AuditChain): a link holds the SHA-256 of the record's content and
// a hash over the previous link.
//
// Verify walks the chain and names the first record that no longer matches
// its link: a record changed or deleted by SQL, a link edited or deleted,
// or a record written with the chain's trigger disabled (the safety net
// behind the trigger: every record written since the chain began must be
// in a link).
//
// The chain alone cannot show that its tail was cut together with the
// records it names. Anchors can: an anchor is the head (its last link's
// number and hash) signed with an Ed25519 key the operator
// holds outside the database (NewAnchor; the relay writes one
// periodically with --audit-anchor-key and logs it). Verify checks every
// anchor of the audit log and any kept elsewhere (Options.External)
// against the chain: an anchor past the chain's end shows a cut tail.
//
// What the chain does not cover: an event and its delivery while the
// event is in the hot table (the hot path writes no attempts row for a
// delivery); they are chained when the event moves into the history.
// A record written by someone with SQL access in the same way outbox
// writes it is chained like any other; the chain shows changes and
// deletions, not who may write.
package audit
