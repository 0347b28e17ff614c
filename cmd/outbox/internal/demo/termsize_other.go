//go:build !unix

package demo

import "os"

// ttyColumns is 0 where the terminal size is not queried: $COLUMNS or 80
// apply.
func ttyColumns(*os.File) int { return 0 }
