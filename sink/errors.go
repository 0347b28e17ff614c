package sink

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/txoutbox/outbox"
)

// Invalid returns a configuration error of the sink named sinkName (e.g.
// "kafka sink"): "<outbox.ErrInvalidConfig>: kafka sink: <message>". It
// matches [outbox.ErrInvalidConfig].
func Invalid(sinkName, format string, args ...any) error {
	return fmt.Errorf("%w: %s: "+format, append([]any{outbox.ErrInvalidConfig, sinkName}, args...)...)
}

// ErrNotEnoughTimeLeft matches the error of a message that a route's
// MinTimeLeft kept from being sent ([TooLateError]). The relay ends such
// an event EXPIRED.
var ErrNotEnoughTimeLeft = errors.New("not enough time left before the deadline")

// TooLateError says that a message had less time before its deadline
// than its route's MinTimeLeft, so it was not sent. It matches
// [ErrNotEnoughTimeLeft] and [outbox.ErrNotAttempted].
type TooLateError struct {
	Route     string
	Left, Min time.Duration
}

func (e *TooLateError) Error() string {
	return fmt.Sprintf("not enough time left: %s s < %s s (min_time_left of route %s)",
		strconv.FormatFloat(math.Floor(e.Left.Seconds()*10)/10, 'f', -1, 64),
		strconv.FormatFloat(e.Min.Seconds(), 'f', -1, 64), e.Route)
}

// Is matches ErrNotEnoughTimeLeft and outbox.ErrNotAttempted.
func (e *TooLateError) Is(target error) bool {
	return target == ErrNotEnoughTimeLeft || target == outbox.ErrNotAttempted
}
