//go:build race

package sqlite_test

// raceEnabled: the race detector slows SQLite (transpiled C) down a lot, so
// the heaviest tests do less.
const raceEnabled = true
