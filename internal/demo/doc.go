// Package demo holds the parts of `outbox demo` that do not need the CLI: the
// mock payment gateway that judges the run (duplicates, order, what it
// accepted), the terminal console that shows live progress, and the summary
// with its pass/fail rules. The scenario itself (the payment service, the
// relays, the scripted incidents) lives in cmd/outbox, which wires the
// concrete stores and sinks.
package demo
