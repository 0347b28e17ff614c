package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/eventlines"
)

// EnqueueCmd reads JSON events, one per line, and enqueues them in one
// transaction.
type EnqueueCmd struct {
	MaxPayloadBytes int  `help:"Largest payload accepted, in bytes." default:"1048576" env:"OUTBOX_ENQUEUE_MAX_PAYLOAD_BYTES"`
	JSON            bool `name:"json" help:"Print the ids as one JSON array."`
}

// Run reads stdin and enqueues.
func (c *EnqueueCmd) Run(ctx context.Context, g *Globals) error {
	limits := outbox.Limits{MaxPayloadBytes: c.MaxPayloadBytes}
	if err := limits.Validate(); err != nil {
		return err
	}
	events, lines, err := eventlines.Read(g.stdin, limits.WithDefaults())
	if err != nil {
		return err
	}
	if len(events) == 0 {
		return fmt.Errorf("no events on stdin: give one JSON object per line, e.g. {\"aggregate_type\":\"payment\",\"aggregate_id\":\"tx-1\",\"event_type\":\"ApprovalRequested\",\"payload\":{}}")
	}
	ring, err := g.keyring()
	if err != nil {
		return err
	}
	b, err := openBackendSealing(ctx, g.DB, g.Table, limits, g.logger, ring)
	if err != nil {
		return err
	}
	defer b.close()
	ids, err := b.enqueue(ctx, events)
	if err != nil {
		var ie *outbox.InvalidEventError
		if errors.As(err, &ie) {
			line := ie.Index + 1
			if ie.Index >= 0 && ie.Index < len(lines) {
				line = lines[ie.Index]
			}
			return eventlines.BadLine(line, ie.Index, err)
		}
		if !strings.HasPrefix(err.Error(), "enqueue: ") { // the backends' own errors say it already
			err = fmt.Errorf("enqueue: %w", err)
		}
		return fmt.Errorf("%w; nothing was enqueued", err)
	}
	if c.JSON {
		return json.NewEncoder(g.stdout).Encode(ids)
	}
	w := bufio.NewWriter(g.stdout)
	for _, id := range ids {
		fmt.Fprintln(w, id)
	}
	return w.Flush()
}
