package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/store/postgres"
)

// TestRelaySessionsPlanForTheCurrentTable: Open's sessions make a custom
// plan at each run (a generic plan made while the table was small would
// keep sequential scans through a backlog); a plan_cache_mode in the DSN
// wins, and ConfigurePool does the same for a pool passed to New.
func TestRelaySessionsPlanForTheCurrentTable(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.Postgres.Addr(t)
	show := func(s *postgres.Store) string {
		t.Helper()
		var mode string
		if err := s.Pool().QueryRow(ctx, "SHOW plan_cache_mode").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		return mode
	}
	s, err := postgres.Open(ctx, dsn, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := show(s); got != "force_custom_plan" {
		t.Errorf("Open: plan_cache_mode = %q, want force_custom_plan", got)
	}

	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.RuntimeParams["plan_cache_mode"] = "auto"
	postgres.ConfigurePool(pc)
	if got := pc.ConnConfig.RuntimeParams["plan_cache_mode"]; got != "auto" {
		t.Errorf("ConfigurePool overrode the DSN's plan_cache_mode: %q", got)
	}
	delete(pc.ConnConfig.RuntimeParams, "plan_cache_mode")
	postgres.ConfigurePool(pc)
	if got := pc.ConnConfig.RuntimeParams["plan_cache_mode"]; got != "force_custom_plan" {
		t.Errorf("ConfigurePool: plan_cache_mode = %q, want force_custom_plan", got)
	}
}
