package sink

import (
	"context"

	"github.com/txoutbox/outbox"
)

// ResultFunc receives the result of one message of a Publish call as soon
// as the sink knows it, before Publish returns: the relay's circuit
// breaker counts a destination that fails or stops answering at that
// moment, not when the whole batch is done. m is the message as the sink
// received it (the relay finds it by its EventID); err is the result
// Publish will return for it.
type ResultFunc func(m *outbox.Message, err error)

type resultFuncKey struct{}

// WithResultFunc returns a copy of ctx that carries f, for ReportResult.
func WithResultFunc(ctx context.Context, f ResultFunc) context.Context {
	return context.WithValue(ctx, resultFuncKey{}, f)
}

// ReportResult gives the result of m to the ResultFunc that ctx carries,
// if any. A sink that sends messages one by one calls it as each result
// becomes final (sinkkit.Precheck.SendByKey does); reporting is optional,
// and a sink that reports nothing only makes the relay learn of faults
// when Publish returns. It must be called at most once per message, with
// the result Publish then returns.
func ReportResult(ctx context.Context, m *outbox.Message, err error) {
	if f, ok := ctx.Value(resultFuncKey{}).(ResultFunc); ok && f != nil {
		f(m, err)
	}
}
