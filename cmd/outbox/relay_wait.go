package main

// The relay starts while its database or its broker is down: it waits
// and retries with backoff instead of exiting, says so at WARN, and at
// INFO once it got through. A DSN that does not parse, a wrong password
// or a missing database is still an immediate error.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

// Waits between attempts: they double from the first to the last.
const (
	firstRetryWait = 250 * time.Millisecond
	lastRetryWait  = 15 * time.Second
)

// openSinkLimited opens the sink of raw, with the limits its URL sets
// (rate=, burst=, max_in_flight=, each route on its own) and the
// --route-limit overrides.
func openSinkLimited(ctx context.Context, raw string, routeLimits []string, opts sinkOptions) (sink.Sink, error) {
	rest, limits, err := sinkkit.CutLimits(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", outbox.ErrInvalidConfig, err)
	}
	cfg := sinkkit.LimitConfig{Default: limits, Routes: map[string]sinkkit.Limits{}}
	for _, spec := range routeLimits {
		route, l, err := sinkkit.ParseRouteLimit(spec, limits)
		if err != nil {
			return nil, fmt.Errorf("%w: --route-limit: %v", outbox.ErrInvalidConfig, err)
		}
		if _, dup := cfg.Routes[route]; dup {
			return nil, fmt.Errorf("%w: --route-limit: route %q is given twice", outbox.ErrInvalidConfig, route)
		}
		cfg.Routes[route] = l
	}
	sk, err := openSink(ctx, rest, opts)
	if err != nil || cfg.IsZero() {
		return sk, err
	}
	limited, err := sinkkit.Limit(sk, cfg)
	if err != nil {
		_ = sk.Close(ctx)
		return nil, err
	}
	attrs := []any{"each_route", limits.String()}
	for r, l := range cfg.Routes {
		attrs = append(attrs, "route "+r, l.String())
	}
	opts.Logger.Info("sink limits", attrs...)
	return limited, nil
}

// openBackendWaiting opens the database, waiting with backoff while it
// cannot be reached, for at most limit (0: no limit).
func openBackendWaiting(ctx context.Context, dsn, table string, limit time.Duration, log *slog.Logger) (*backend, error) {
	wait := firstRetryWait
	start := time.Now()
	for attempt := 1; ; attempt++ {
		b, err := openBackend(ctx, dsn, table, outbox.Limits{}, log)
		if err == nil {
			if attempt > 1 {
				log.Info("database reachable: relay starting", "attempts", attempt, "waited", time.Since(start).Round(time.Millisecond))
			}
			return b, nil
		}
		if !dbUnreachable(err) || ctx.Err() != nil {
			return nil, err
		}
		if limit > 0 && time.Since(start)+wait > limit {
			return nil, fmt.Errorf("the database is still unreachable after --start-wait %s: %w", limit, err)
		}
		if attempt == 1 || attempt%10 == 0 {
			log.Warn("the database is unreachable; retrying", "attempt", attempt, "retry_in", wait, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("gave up waiting for the database: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, lastRetryWait)
	}
}

// dbUnreachable reports whether err says the database could not be
// reached (refused, reset, timed out, DNS, starting up, out of
// connections), as opposed to a configuration the user must fix (a DSN
// that does not parse, a wrong password, a missing database).
func dbUnreachable(err error) bool {
	if errors.Is(err, outbox.ErrInvalidConfig) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P03", "53300", "57P01", "57P02": // starting up, too many connections, shutting down
			return true
		}
		return false
	}
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) {
		return myErr.Number == 1040 || myErr.Number == 1053 // too many connections, shutting down
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, mysql.ErrInvalidConn) {
		return true
	}
	// Some drivers' errors reach here as text only (a redacted message).
	msg := strings.ToLower(err.Error())
	for _, s := range []string{"connection refused", "connection reset", "i/o timeout", "no such host",
		"server misbehaving", "network is unreachable", "the database system is starting up", "bad connection", "unexpected eof"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// waitForSink waits, for a sink that connects in the background, until
// it has reached its destination once, so that a relay started while the
// broker is down spends no retries on it; it logs at WARN while waiting
// (the sink's own WARN says why) and at INFO once through.
func waitForSink(ctx context.Context, raw string, sk sink.Sink, limit time.Duration, log *slog.Logger) error {
	u, err := url.Parse(raw)
	h, ok := sk.(sink.Health)
	if err != nil || !ok || !sinkKinds[strings.ToLower(u.Scheme)].connects {
		return nil
	}
	start := time.Now()
	warned := time.Time{}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		up, lastErr, _ := h.Reachable()
		if up {
			if !warned.IsZero() {
				log.Info("sink reachable: relay starting", "sink", redactURL(raw), "waited", time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		if limit > 0 && time.Since(start) > limit {
			return fmt.Errorf("the sink's destination is still unreachable after --start-wait %s: %v", limit, lastErr)
		}
		if lastErr != nil && time.Since(warned) > 30*time.Second {
			// Without the error: the sink logs each failure itself (the
			// first and every 20th), so it is printed once.
			log.Warn("the sink's destination is unreachable; waiting for it before claiming events", "sink", redactURL(raw))
			warned = time.Now()
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("gave up waiting for the sink: %w (last error: %v)", ctx.Err(), lastErr)
			}
			return fmt.Errorf("gave up waiting for the sink: %w", ctx.Err())
		case <-tick.C:
		}
	}
}
