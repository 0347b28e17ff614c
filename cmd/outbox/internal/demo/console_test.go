package demo

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// fakeClock advances by step on every reading.
func fakeClock(step time.Duration) func() time.Time {
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time {
		t = t.Add(step)
		return t
	}
}

// TestConsoleLines: off a terminal, every status is one plain line: no
// carriage return, no escape sequence, nothing redrawn.
func TestConsoleLines(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	c := NewConsole(&buf, false)
	c.SetClock(fakeClock(100 * time.Millisecond))
	c.Printf("INCIDENT 1", "gateway down for %s", "2s")
	c.Status("PENDING 3  PROCESSED 10", "5 delivered/s", "now: incident 1")
	c.Status("PENDING 0  PROCESSED 13", "3 delivered/s", "now: normal traffic")
	c.Printf("", "indented")
	c.ClearStatus()
	out := buf.String()
	if strings.ContainsAny(out, "\r\x1b") {
		t.Fatalf("line output contains a carriage return or an escape sequence: %q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("got %d lines, want 4 (2 narrative, 2 progress):\n%s", len(lines), out)
	}
	if !strings.HasPrefix(lines[1], "[") || !strings.Contains(lines[1], "progress") ||
		!strings.Contains(lines[1], "PENDING 3  PROCESSED 10 | 5 delivered/s | now: incident 1") {
		t.Errorf("progress line %q: want a stamp, the tag and the status lines joined with |", lines[1])
	}
	if !strings.Contains(lines[0], "INCIDENT 1 gateway down for 2s") || !strings.HasPrefix(lines[0], "[  0.1s] ") {
		t.Errorf("narrative line %q", lines[0])
	}
}

// TestConsoleLive: on a terminal, the status block is erased before a
// narrative line and redrawn after it, and cut to the width.
func TestConsoleLive(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	c := NewConsole(&buf, true)
	c.width = 30
	c.SetClock(fakeClock(100 * time.Millisecond))
	c.Status("first status line that is much longer than thirty", "second")
	drawn := buf.String()
	if strings.Contains(drawn, "much longer than thirty") {
		t.Errorf("status line not cut to the width: %q", drawn)
	}
	buf.Reset()
	c.Printf("ALARM", "event failed")
	out := buf.String()
	// Erase two lines (clear, up, clear), print the line, redraw.
	if !strings.HasPrefix(out, "\r\x1b[K\x1b[1A\x1b[K[") {
		t.Fatalf("narrative did not start by erasing the 2-line status: %q", out)
	}
	if !strings.Contains(out, "ALARM      event failed\n") || !strings.HasSuffix(out, "second") {
		t.Fatalf("narrative then redraw expected: %q", out)
	}
	buf.Reset()
	c.ClearStatus()
	if buf.String() != "\r\x1b[K\x1b[1A\x1b[K" {
		t.Fatalf("ClearStatus wrote %q", buf.String())
	}
	buf.Reset()
	c.Printf("x", "after")
	if strings.Contains(buf.String(), "\x1b") {
		t.Fatalf("after ClearStatus nothing is redrawn: %q", buf.String())
	}
}

func TestIsTerminal(t *testing.T) {
	t.Parallel()
	if IsTerminal(&bytes.Buffer{}) {
		t.Fatal("a buffer is not a terminal")
	}
}
