package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox/audit"
)

// TestAnchorInLogLines: --anchors-file finds the anchors a relay logged,
// in either log format, and skips every other line.
func TestAnchorInLogLines(t *testing.T) {
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	a := audit.Anchor{Table: "outbox_events", Seq: 7, Hash: strings.Repeat("0f", 32), At: time.Now().UTC(), KeyID: audit.KeyID(pub)}
	a.Signature = signAnchor(key, a)
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		var h slog.Handler = slog.NewTextHandler(&buf, nil)
		if format == "json" {
			h = slog.NewJSONHandler(&buf, nil)
		}
		log := slog.New(h)
		log.Info("relay configured", "table", "outbox_events")
		log.Info("anchored the audit chain", "table", a.Table, "seq", a.Seq, "anchor", a.String())
		var found []audit.Anchor
		for _, line := range strings.Split(buf.String(), "\n") {
			if got, ok := anchorInLine(line); ok {
				found = append(found, got)
			}
		}
		if len(found) != 1 || !found[0].Verify(pub) || found[0].Seq != 7 {
			t.Errorf("%s log: found %v; want the one anchor, verifying", format, found)
		}
	}
}

func signAnchor(key ed25519.PrivateKey, a audit.Anchor) string {
	return base64.StdEncoding.EncodeToString(ed25519.Sign(key, a.Message()))
}
