package sinkkit

import ()

// Fill returns a result slice of len(msgs) with every element set to err.
func Fill(n int, err error) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}
