package sqlite

import (
	"context"

	"github.com/txoutbox/outbox"
)

var _ outbox.ContextHeaders = (*Store)(nil)

// ContextHeaders implements outbox.ContextHeaders with Config.ContextHeaders.
func (s *Store) ContextHeaders(ctx context.Context, headers map[string]string) {
	if s.cfg.ContextHeaders != nil {
		s.cfg.ContextHeaders(ctx, headers)
	}
}
