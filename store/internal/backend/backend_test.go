package backend

import (
	"errors"
	"testing"
)

func TestHeadersAndWrapError(t *testing.T) {
	if h, err := EncodeHeaders(0, nil); h != "{}" || err != nil {
		t.Fatalf("%q %v", h, err)
	}
	if got := DecodeHeaders([]byte(`{"a":"b"}`)); got["a"] != "b" || DecodeHeaders([]byte("{}")) != nil || DecodeHeaders([]byte("[1]")) != nil {
		t.Fatalf("decode: %v", got)
	}
	if err := WrapError("stats", errors.New("x"), `table "t"`); err.Error() != "stats: table \"t\" does not exist: run `outbox migrate` first: x" {
		t.Fatalf("wrap: %v", err)
	}
	if WrapError("stats", nil, "") != nil {
		t.Fatal("wrap(nil) != nil")
	}
}
