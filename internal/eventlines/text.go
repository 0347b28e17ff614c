package eventlines

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/txoutbox/outbox"
)

// lineProblem is a refusal of one field of a line (field "" for the line
// itself). It matches outbox.ErrInvalidEvent.
func lineProblem(field, format string, args ...any) error {
	return &outbox.InvalidEventError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// lineError is a refused input line: "line 3: aggregate_id: is required;
// nothing was enqueued". It unwraps to the *outbox.InvalidEventError.
type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string {
	var ie *outbox.InvalidEventError
	switch {
	case !errors.As(e.err, &ie):
		return fmt.Sprintf("line %d: %v; nothing was enqueued", e.line, e.err)
	case ie.Field == "":
		return fmt.Sprintf("line %d %s; nothing was enqueued", e.line, ie.Reason)
	default:
		return fmt.Sprintf("line %d: %s: %s; nothing was enqueued", e.line, ie.Field, ie.Reason)
	}
}

func (e *lineError) Unwrap() error { return e.err }

// BadLine returns the error for input line n, the index-th event (its
// *outbox.InvalidEventError, if err holds one, gets Index set). The
// error reads "line n: field: reason; nothing was enqueued".
func BadLine(n, index int, err error) error {
	var ie *outbox.InvalidEventError
	if errors.As(err, &ie) {
		ie.Index = index
	}
	return &lineError{line: n, err: err}
}

// jsonText returns the JSON string raw holds ("" when absent or null). It
// refuses bytes that are not UTF-8 and \u escapes of lone UTF-16
// surrogates, both of which a JSON decoder would replace with U+FFFD.
func jsonText(field string, raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] != '"' {
		return "", lineProblem(field, "must be a JSON string, not %s", truncateText(string(raw), 40))
	}
	if !utf8.Valid(raw) {
		return "", lineProblem(field, "is not valid UTF-8: encode the input as UTF-8 (an id with other bytes would be stored changed)")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", lineProblem(field, "is not a valid JSON string: %v", err)
	}
	if strings.Count(s, "\uFFFD") > replacementChars(raw) {
		return "", lineProblem(field, `holds a \u escape of a lone UTF-16 surrogate (\ud800-\udfff unpaired), which is no character: write the character itself or a valid surrogate pair`)
	}
	return s, nil
}

// replacementChars counts the U+FFFD characters a JSON string holds,
// written as UTF-8 or as the escape \ufffd.
func replacementChars(raw []byte) int {
	n := bytes.Count(raw, []byte("\uFFFD"))
	for i := 0; i+5 < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] == 'u' && strings.EqualFold(string(raw[i+2:i+6]), "fffd") {
			n++
		}
		i++ // the escaped character
	}
	return n
}

// jsonHeaders reads the headers object. Keys are taken from the raw input
// too, so that two keys differing only in bytes that are not UTF-8 cannot
// become one.
func jsonHeaders(raw json.RawMessage) (map[string]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, lineProblem("headers", "must be a JSON object of strings, e.g. {\"traceparent\":\"00-...\"}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // {
		return nil, lineProblem("headers", "is not a JSON object: %v", err)
	}
	out := map[string]string{}
	for dec.More() {
		start := dec.InputOffset()
		if _, err := dec.Token(); err != nil {
			return nil, lineProblem("headers", "is not a JSON object: %v", err)
		}
		keyRaw := raw[start:dec.InputOffset()]
		keyRaw = keyRaw[bytes.IndexByte(keyRaw, '"'):] // after the comma and spaces
		key, err := jsonText("headers", keyRaw)
		if err != nil {
			return nil, lineProblem("headers", "a key %s", err.(*outbox.InvalidEventError).Reason)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, lineProblem("headers", "value of %q: %v", key, err)
		}
		if out[key], err = jsonText("headers", v); err != nil {
			return nil, lineProblem("headers", "value of %q %s", key, err.(*outbox.InvalidEventError).Reason)
		}
	}
	return out, nil
}

// jsonTime reads an RFC 3339 time ("2026-01-02T15:04:05Z").
func jsonTime(field string, raw json.RawMessage) (time.Time, error) {
	s, err := jsonText(field, raw)
	if err != nil || s == "" {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, lineProblem(field, "%q is not an RFC 3339 time such as \"2026-01-02T15:04:05Z\"", s)
	}
	return t, nil
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
