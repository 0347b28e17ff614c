package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txoutbox/outbox/admin"
)

// GET /api/v1/stats reports the CDC source's stream, saved position,
// lease holder and lag under "cdc" when Config.CDC is set, omits "cdc"
// without one, and answers a failed read with a 500 that does not quote
// the error.
func TestStatsReportsCDCSource(t *testing.T) {
	b := newSQLite(t)
	lag := int64(4096)
	saved := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	status := &admin.CDCStatus{Source: "binlog", Stream: "outbox_binlog", Position: "mysql-bin.000003:1234 (0-7-42)",
		File: "mysql-bin.000003", Offset: 1234, GTIDSet: "0-7-42", SavedAt: saved, Holder: "relay-a", LagBytes: &lag}
	base := serve(t, admin.Config{Store: b.store, CDC: func(context.Context) (*admin.CDCStatus, error) { return status, nil }})
	var s struct {
		CDC *struct {
			Source   string
			Stream   string
			Position string
			File     string
			Offset   uint32
			GTIDSet  string    `json:"gtid_set"`
			SavedAt  time.Time `json:"saved_at"`
			Holder   string
			LagBytes *int64 `json:"lag_bytes"`
		}
	}
	client{t, base, viewerToken}.get("/api/v1/stats").want(t, 200).decode(t, &s)
	c := s.CDC
	if c == nil || c.Source != "binlog" || c.Stream != "outbox_binlog" || c.Position != status.Position || c.File != status.File ||
		c.Offset != 1234 || c.GTIDSet != "0-7-42" || !c.SavedAt.Equal(saved) || c.Holder != "relay-a" || c.LagBytes == nil || *c.LagBytes != lag {
		t.Fatalf("stats cdc: %+v", c)
	}

	status.LagBytes, status.Holder = nil, ""
	var raw struct {
		CDC map[string]any
	}
	client{t, base, viewerToken}.get("/api/v1/stats").want(t, 200).decode(t, &raw)
	if v, ok := raw.CDC["lag_bytes"]; !ok || v != nil {
		t.Fatalf("an unknown lag is %v (present %v), want null", v, ok)
	}
	if v, ok := raw.CDC["holder"]; !ok || v != "" {
		t.Fatalf("no holder is %v (present %v), want \"\"", v, ok)
	}

	plain := serve(t, admin.Config{Store: b.store})
	if a := (client{t, plain, viewerToken}).get("/api/v1/stats").want(t, 200); contains(string(a.body), `"cdc"`) {
		t.Fatalf("stats without a CDC source report one: %s", a.body)
	}

	failing := serve(t, admin.Config{Store: b.store, CDC: func(context.Context) (*admin.CDCStatus, error) {
		return nil, errors.New("read the saved position: Access denied for user 'relay' (using password: YES) s3cr3t-pw")
	}})
	if a := (client{t, failing, viewerToken}).get("/api/v1/stats").want(t, 500); contains(string(a.body), "s3cr3t-pw") || contains(string(a.body), "Access denied") {
		t.Fatalf("a failed CDC read is quoted in the answer: %s", a.body)
	}
}
