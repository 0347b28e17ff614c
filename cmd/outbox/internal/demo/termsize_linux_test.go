package demo

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestConsoleWidthFromTerminal: on a terminal the live status is cut to
// the width the terminal reports, without $COLUMNS, and follows a resize.
func TestConsoleWidthFromTerminal(t *testing.T) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal on this machine: %v", err)
	}
	defer master.Close()
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	setCols := func(cols uint16) {
		if err := unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: cols}); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("COLUMNS", "")
	setCols(173)
	c := NewConsole(tty, true)
	if c.width != 173 {
		t.Fatalf("width %d on a 173-column terminal", c.width)
	}
	setCols(121)
	go func() { // drain what the console writes, so that it never blocks
		buf := make([]byte, 4096)
		for {
			if _, err := master.Read(buf); err != nil {
				return
			}
		}
	}()
	c.Status("a status line")
	if c.width != 121 {
		t.Fatalf("width %d after the terminal was resized to 121 columns", c.width)
	}
	if w := termWidth(nil); w != 80 {
		t.Errorf("no terminal, no $COLUMNS: width %d, want 80", w)
	}
	t.Setenv("COLUMNS", "132")
	if w := termWidth(nil); w != 132 {
		t.Errorf("$COLUMNS=132: width %d", w)
	}
}
