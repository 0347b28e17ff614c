package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/audit"
	"github.com/txoutbox/outbox/store"
)

// anchoredTable is a table whose audit chain the relay anchors.
type anchoredTable struct {
	table string
	store store.Store
}

// anchorKey reads --audit-anchor-key (nil without it).
func (c *RelayCmd) anchorKey() (ed25519.PrivateKey, error) {
	if c.AuditAnchorKey == "" {
		return nil, nil
	}
	if c.AuditAnchorEvery < time.Minute {
		return nil, fmt.Errorf("%w: --audit-anchor-every must be at least 1m, got %s", outbox.ErrInvalidConfig, c.AuditAnchorEvery)
	}
	return audit.ReadSigningKey(c.AuditAnchorKey)
}

// startAnchors signs the head of each table's audit chain every
// --audit-anchor-every and when the relay stops, writes each anchor to the table's audit log
// and logs it at INFO: the log is the copy kept outside the database that
// shows a cut tail (`outbox audit verify --anchors-file`). A head that has
// not moved since this relay's last anchor of it is not anchored again.
func (c *RelayCmd) startAnchors(ctx context.Context, log *slog.Logger, key ed25519.PrivateKey, tables []anchoredTable) func() {
	if key == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := make([]int64, len(tables))
		for i := range last {
			last[i] = -1
		}
		t := time.NewTicker(c.AuditAnchorEvery)
		defer t.Stop()
		anchorAll := func(ctx context.Context) {
			for i, at := range tables {
				seq, err := anchorIfMoved(ctx, at, key, "relay:"+c.RelayID, last[i], log)
				if err != nil {
					log.Warn("could not anchor the audit chain; will try again", "table", at.table, "err", err)
					continue
				}
				last[i] = seq
			}
		}
		for {
			select {
			case <-ctx.Done():
				// The last anchor covers what this relay did.
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				anchorAll(sctx)
				cancel()
				return
			case <-t.C:
				anchorAll(ctx)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// anchorIfMoved anchors the table's chain unless it is empty or its head
// is where this relay's last anchor (at link last, written as link
// last+1) left it. It returns the link anchored, or last.
func anchorIfMoved(ctx context.Context, at anchoredTable, key ed25519.PrivateKey, actor string, last int64, log *slog.Logger) (int64, error) {
	chain := at.store.AuditChain()
	defer chain.Close()
	head, err := chain.Head(ctx)
	if err != nil {
		return last, err
	}
	if head.Seq == 0 || (last >= 0 && head.Seq <= last+1) {
		return last, nil
	}
	a, err := audit.NewAnchor(ctx, chain, at.table, key, actor)
	if err != nil {
		return last, err
	}
	log.Info("anchored the audit chain", "table", at.table, "seq", a.Seq, "anchor", a.String())
	return a.Seq, nil
}
