package admin

import (
	"context"
	"time"
)

// CDCStatus is what GET /api/v1/stats reports, under "cdc", of the
// change-data-capture source that feeds the relays (`outbox relay
// --source binlog`): the stream, the position saved in the database,
// the relay holding the stream lease and the lag. It carries no
// credentials.
type CDCStatus struct {
	// Source names the source, e.g. "binlog".
	Source string `json:"source"`
	// Stream names the stream (the binlog source's is <table>_binlog).
	Stream string `json:"stream"`
	// Position renders the saved position (file:offset and GTID set).
	Position string `json:"position"`
	// File, Offset and GTIDSet are the saved position's parts.
	File    string `json:"file,omitempty"`
	Offset  uint32 `json:"offset,omitempty"`
	GTIDSet string `json:"gtid_set,omitempty"`
	// SavedAt is when the position was last saved.
	SavedAt time.Time `json:"saved_at"`
	// Holder is the relay holding the stream lease, "" when none does.
	Holder string `json:"holder"`
	// LagBytes is the binary log the server wrote after the saved
	// position; nil when the server did not say (SHOW BINARY LOGS needs
	// REPLICATION CLIENT).
	LagBytes *int64 `json:"lag_bytes"`
}

// cdcStatus reads the source's status for the stats; nil when there is
// no CDC source (Config.CDC unset, or it reports none).
func (h *Handler) cdcStatus(ctx context.Context) (*CDCStatus, error) {
	if h.cfg.CDC == nil {
		return nil, nil
	}
	return h.cfg.CDC(ctx)
}
