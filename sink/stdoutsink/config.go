package stdoutsink

import "io"

// Config configures a [Sink]. The zero value writes to os.Stdout.
type Config struct {
	// Writer receives the lines. Default os.Stdout. The sink never closes
	// it. A writer with a Flush() error method (e.g. *bufio.Writer) is
	// flushed at the end of every Publish call and by Close.
	Writer io.Writer
}
