package demo

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Console writes the demo's output: narrative lines, each stamped with the
// time since the start, and a live status. On a terminal the status is a
// block of lines redrawn in place below the narrative; anywhere else (a pipe,
// a file, CI) every status is printed once as a plain line, so the output
// stays readable and grep-able. It is safe for concurrent use.
type Console struct {
	mu    sync.Mutex
	w     io.Writer
	tty   *os.File // w, when it is a file: its width is asked again at each redraw
	live  bool
	width int
	start time.Time
	now   func() time.Time
	drawn int // status lines currently on screen (live mode)
	shown []string
}

// NewConsole returns a console on w. live redraws the status in place (use
// IsTerminal(w)).
func NewConsole(w io.Writer, live bool) *Console {
	f, _ := w.(*os.File)
	return &Console{w: w, tty: f, live: live, width: termWidth(f), start: time.Now(), now: time.Now}
}

// SetClock replaces the clock (for tests) and restarts the elapsed time.
func (c *Console) SetClock(now func() time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
	c.start = now()
}

// Live reports whether the status is redrawn in place.
func (c *Console) Live() bool { return c.live }

// Elapsed returns the time since the console started.
func (c *Console) Elapsed() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now().Sub(c.start)
}

// IsTerminal reports whether w is a terminal that understands cursor
// movement: a character device, with TERM not "dumb".
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	return os.Getenv("TERM") != "dumb"
}

// termWidth is the width live status lines are cut to: the width of the
// terminal behind f, as the terminal reports it (shells do not export
// $COLUMNS to programs), else $COLUMNS, else 80.
func termWidth(f *os.File) int {
	if f != nil {
		if n := ttyColumns(f); n >= 20 {
			return n
		}
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n >= 20 {
		return n
	}
	return 80
}

// stamp is the prefix of every narrative line: "[ 12.3s] ".
func (c *Console) stamp() string {
	return fmt.Sprintf("[%5.1fs] ", c.now().Sub(c.start).Seconds())
}

// Printf prints one narrative line: the stamp, tag in a column of its own,
// then the text. An empty tag indents the text under the previous one.
func (c *Console) Printf(tag, format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eraseLocked()
	fmt.Fprintf(c.w, "%s%-10s %s\n", c.stamp(), tag, text)
	c.redrawLocked()
}

// Write prints p as is (a block of text such as a table), above the status.
func (c *Console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eraseLocked()
	n, err := c.w.Write(p)
	c.redrawLocked()
	return n, err
}

// Status shows the live status. Live, the lines replace the previous
// status in place, each cut to the terminal width. Otherwise they are
// printed once as one plain line, joined with " | ".
func (c *Console) Status(lines ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stamp := c.stamp()
	if !c.live {
		fmt.Fprintf(c.w, "%s%-10s %s\n", stamp, "progress", strings.Join(lines, " | "))
		return
	}
	c.eraseLocked()
	if c.tty != nil {
		c.width = termWidth(c.tty) // the window may have been resized
	}
	c.shown = c.shown[:0]
	for i, l := range lines {
		if i == 0 {
			l = stamp + l
		} else {
			l = strings.Repeat(" ", len(stamp)) + l
		}
		c.shown = append(c.shown, l)
	}
	c.redrawLocked()
}

// ClearStatus removes the live status (before the final output).
func (c *Console) ClearStatus() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eraseLocked()
	c.shown = c.shown[:0]
}

// eraseLocked removes the drawn status block, leaving the cursor at the
// start of its first line.
func (c *Console) eraseLocked() {
	if !c.live || c.drawn == 0 {
		return
	}
	var b strings.Builder
	b.WriteString("\r\x1b[K")
	for i := 1; i < c.drawn; i++ {
		b.WriteString("\x1b[1A\x1b[K")
	}
	io.WriteString(c.w, b.String())
	c.drawn = 0
}

// redrawLocked draws the status block; the cursor stays at the end of its
// last line so that the next erase knows where it is.
func (c *Console) redrawLocked() {
	if !c.live || len(c.shown) == 0 {
		return
	}
	var b strings.Builder
	for i, l := range c.shown {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(cut(l, c.width-1))
	}
	io.WriteString(c.w, b.String())
	c.drawn = len(c.shown)
}

// cut shortens s to n characters, so that a line never wraps (a wrapped
// line would break the redraw).
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:max(n, 0)])
}

// shorten returns s cut to n characters with "..." when it is longer.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return cut(s, n) + "..."
}
