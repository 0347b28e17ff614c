package backend

import (
	"encoding/json"
	"sync"

	"github.com/txoutbox/outbox"
)

// EncodeHeaders renders an event's headers as the JSON object the headers
// column holds, "{}" when there are none. index is the event's position in
// the Enqueue call, for the outbox.InvalidEventError.
func EncodeHeaders(index int, h map[string]string) (string, error) {
	if len(h) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return "", &outbox.InvalidEventError{Index: index, Field: "headers", Reason: err.Error()}
	}
	return string(b), nil
}

// DecodeHeaders reads the headers column: nil for "{}", for nothing, and
// for anything that is not a JSON object of strings.
func DecodeHeaders(b []byte) map[string]string {
	if len(b) <= 2 { // "{}"
		return nil
	}
	var h map[string]string
	if err := json.Unmarshal(b, &h); err != nil {
		return nil
	}
	return h
}

// EnqueueObservers holds the functions registered through a backend's
// EnqueueObserver.OnEnqueue. The zero value is empty and ready to use; it is
// safe for concurrent use.
type EnqueueObservers struct {
	mu   sync.Mutex
	fs   map[int]func()
	next int
}

// Add registers f; the returned func removes it.
func (o *EnqueueObservers) Add(f func()) (remove func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fs == nil {
		o.fs = map[int]func(){}
	}
	id := o.next
	o.next++
	o.fs[id] = f
	return func() {
		o.mu.Lock()
		delete(o.fs, id)
		o.mu.Unlock()
	}
}

// Notify calls every registered function, outside the lock, so that a
// function may add or remove observers.
func (o *EnqueueObservers) Notify() {
	o.mu.Lock()
	fs := make([]func(), 0, len(o.fs))
	for _, f := range o.fs {
		fs = append(fs, f)
	}
	o.mu.Unlock()
	for _, f := range fs {
		f()
	}
}
