//go:build unix

package demo

import (
	"os"

	"golang.org/x/sys/unix"
)

// ttyColumns asks the terminal behind f for its width (TIOCGWINSZ); 0
// when f is not a terminal.
func ttyColumns(f *os.File) int {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}
