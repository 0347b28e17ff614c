// Package demo is `outbox demo`: the QR-payment story of the transactional
// outbox, end to end. It holds the payment service that writes a payment
// and its event in one transaction, into ONE outbox table; the
// destinations file that routes the approval requests to the mock payment
// gateway over HTTP and the payment and merchant events to an in-process
// Kafka-protocol broker (each destination with a table of its own); the
// gateway and the Kafka consumer that judge the run (duplicates, order,
// what they received); the two relays (one in this process, one a
// separate `outbox relay --config` process that is killed for real), each
// the router plus one relay per destination table; the seven scripted
// incidents, the terminal console that shows live progress, and the
// summary with its pass/fail rules.
//
// The command gives [Run] its ways to open a store and a sink ([Env]), so
// the demo runs on exactly what `outbox relay` runs on. Relay-2 re-executes
// the running program as `outbox relay`: Run works only inside the outbox
// command (or a test binary that acts as it).
package demo
