package store

// Compensated is the audit outcome that links an EXPIRED event to the
// compensating event its on_expired enqueued: the row's claim token is the
// compensating event's id.
const Compensated OutcomeKind = "COMPENSATED"
