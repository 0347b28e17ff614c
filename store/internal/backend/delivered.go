package backend

import "github.com/txoutbox/outbox/store"

// DeliveredOnRow reports whether outcome o is recorded on its event row
// (the delivered_* columns) rather than as a row of the attempts table: an
// attempted delivery without an error text. A delivery whose outcome
// carries a text (a sink's note) keeps its attempt row, which has a column
// for it. The completion plan (store/internal/completion) applies this
// rule for every backend.
func DeliveredOnRow(o *store.Outcome) bool {
	return o.Kind == store.Delivered && o.Attempted && o.Error == ""
}
