package demo

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestDemoFailedEventIsOneLine: a FAILED event's ERROR log record (some
// 600 characters) is not printed; relay-2's becomes one ALARM line with
// the aggregate, the attempts and the reason, and relay-1's is left to its
// OnFailed callback.
func TestDemoFailedEventIsOneLine(t *testing.T) {
	var logged bytes.Buffer
	reason := "permanent error: HTTP 400 from the gateway: merchant \"m-bad\" is invalid; 결제 거절"
	slog.New(slog.NewTextHandler(&logged, nil)).Error(failedMessage, "event_id", "0194f0e0-0000-7000-8000-000000000001",
		"aggregate_type", "payment", "aggregate_id", "tx 17", "event_type", "ApprovalRequested", "attempts", 1,
		"reason", reason, "blocked", strings.Repeat("later events wait until an operator acts ", 8))
	input := "level=WARN msg=\"recording batch outcome failed; retrying\"\n" + logged.String()

	var out bytes.Buffer
	con := NewConsole(&out, false)
	var got []failedLine
	forwardChildLog(strings.NewReader(input), con, func(s string) string { return s }, func(f failedLine) { got = append(got, f) })
	want := failedLine{"payment", "tx 17", "ApprovalRequested", "1", reason}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("FAILED lines = %+v, want %+v", got, want)
	}
	if printed := out.String(); strings.Contains(printed, failedMessage) || !strings.Contains(printed, "recording batch outcome failed") {
		t.Errorf("console:\n%s\nwant the WARN line only", printed)
	}
	if line := want.alarmText("relay-2"); len(line) > 300 || strings.Contains(line, "\n") {
		t.Errorf("alarm line of %d bytes: %q", len(line), line)
	}

	out.Reset()
	log := consoleLogger(con, "relay-1", func(s string) string { return s })
	log.Error(failedMessage, "reason", reason)
	log.Warn("lease lost")
	if printed := out.String(); strings.Contains(printed, failedMessage) || !strings.Contains(printed, "lease lost") {
		t.Errorf("relay-1's console lines:\n%s\nwant the WARN line only", printed)
	}
}
