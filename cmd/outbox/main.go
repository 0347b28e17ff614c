// Command outbox runs the transactional outbox relay and operates the
// outbox: migrate, enqueue, relay, status and events.
//
// The global flags and the relay's settings can also be set with OUTBOX_*
// environment variables (shown in --help). Errors are one line on stderr with a non-zero exit code; a DSN's
// password never appears in output.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/txoutbox/outbox"
)

// Globals are the flags every command shares.
type Globals struct {
	DB        string `help:"Database URL: postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db, sqlite:///abs/path.db or sqlite://relative.db." env:"OUTBOX_DB" placeholder:"DSN"`
	Table     string `help:"Outbox table name." default:"outbox_events" env:"OUTBOX_TABLE"`
	LogLevel  string `help:"Log level: debug, info, warn, error." default:"info" env:"OUTBOX_LOG_LEVEL" enum:"debug,info,warn,error"`
	LogFormat string `help:"Log format: text or json." default:"text" env:"OUTBOX_LOG_FORMAT" enum:"text,json"`
	// Config and Destination: see destinations.go.
	Config      string `help:"A destinations file (docs/DESTINATIONS.md): relay delivers to its destinations, migrate creates their tables, status and events show report each destination." env:"OUTBOX_CONFIG" placeholder:"FILE"`
	Destination string `help:"With --config: status, events, routes and audit act on this destination's table (its delivery state) instead of the outbox table." env:"OUTBOX_DESTINATION" placeholder:"NAME"`
	// The key-encryption keys of payload encryption: see encryption.go.
	EncryptionFlags

	stdin          io.Reader
	stdout, stderr io.Writer
	secrets        *secrets
	logger         *slog.Logger
}

// CLI is the command tree.
type CLI struct {
	Globals

	Demo    DemoCmd    `cmd:"" help:"Run the QR-payment story end to end on SQLite (or --db): gateway, relays, four incidents, a checked summary."`
	Migrate MigrateCmd `cmd:"" help:"Create or upgrade the outbox tables (idempotent)."`
	Enqueue EnqueueCmd `cmd:"" help:"Enqueue JSON-lines events from stdin, all in one transaction."`
	Relay   RelayCmd   `cmd:"" help:"Deliver committed events to a sink."`
	Status  StatusCmd  `cmd:"" help:"Counts by status, oldest pending age and blocked aggregates."`
	Events  EventsCmd  `cmd:"" help:"List, show, retry, skip or purge events."`
	Audit   AuditCmd   `cmd:"" help:"The audit trail: an event's delivery receipt; verify the tamper-evident chain, anchor it with your key."`
	History HistoryCmd `cmd:"" help:"Move finished events into the history by hand, list its months, or drop the months past a retention."`
	Admin   AdminCmd   `cmd:"" help:"Serve the admin API and dashboard (no relay)."`
	Routes  RoutesCmd  `cmd:"" help:"List the routes' circuit breakers, or open or close one by hand (audited)."`
	Keys    KeysCmd    `cmd:"" help:"The data keys of payload encryption: list, rotate the key-encryption key, crypto-shred a subject."`
	Bench   BenchCmd   `cmd:"" help:"Benchmark this project on PostgreSQL: drain, steady and latency (docs/BENCHMARKS.md)."`
	Version VersionCmd `cmd:"" help:"Print the version."`
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// VersionCmd prints the version.
type VersionCmd struct{}

// Run prints the version.
func (VersionCmd) Run(g *Globals) error {
	fmt.Fprintln(g.stdout, "outbox", version)
	return nil
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// exitError carries a specific exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// run parses args, runs the command and returns the exit code: 0 on
// success, 2 on a usage error, 1 on any other error.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cli := CLI{}
	sec := &secrets{}
	for _, a := range args {
		sec.addURL(strings.TrimPrefix(strings.TrimPrefix(a, "--db="), "--sink="))
	}
	for _, v := range []string{"OUTBOX_DB", "OUTBOX_SINK"} {
		sec.addURL(os.Getenv(v))
	}
	exitCode := -1
	parser, err := newParser(&cli, stdout, stderr, func(code int) { exitCode = code })
	if err != nil {
		fmt.Fprintf(stderr, "outbox: %v\n", err)
		return 1
	}
	kctx, err := parser.Parse(args)
	if exitCode >= 0 { // --help
		return exitCode
	}
	if err != nil {
		fmt.Fprintf(stderr, "outbox: %s (see outbox --help)\n", sec.redact(oneLine(err.Error())))
		return 2
	}
	sec.addURL(cli.DB)
	cli.Globals.stdin, cli.Globals.stdout, cli.Globals.stderr = stdin, stdout, stderr
	cli.Globals.secrets = sec
	cli.Globals.logger = newLogger(stderr, cli.LogLevel, cli.LogFormat, sec)

	if err := cli.Globals.selectDestination(kctx.Command()); err != nil {
		fmt.Fprintf(stderr, "outbox: %s\n", sec.redact(err.Error()))
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	kctx.BindTo(ctx, (*context.Context)(nil))
	if err := kctx.Run(&cli.Globals); err != nil {
		fmt.Fprintf(stderr, "outbox: %s\n", sec.redact(oneLine(strings.TrimPrefix(err.Error(), "outbox: "))))
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		if errors.Is(err, outbox.ErrInvalidConfig) {
			return 2
		}
		return 1
	}
	return 0
}

// newParser builds the command line parser. Environment variables are
// declared flag by flag (env:"..."), one variable for one flag: the global
// flags and the relay's settings as OUTBOX_<FLAG> (OUTBOX_DB, OUTBOX_SINK,
// OUTBOX_BATCH, ...), the flags of demo, bench and enqueue as
// OUTBOX_<COMMAND>_<FLAG>; the flags of the other commands have none. (A
// default OUTBOX_<FLAG> for every flag gave OUTBOX_STATUS to three flags,
// and OUTBOX_STATUS=true turned `outbox migrate` into a status check.)
func newParser(cli *CLI, stdout, stderr io.Writer, exit func(int)) (*kong.Kong, error) {
	return kong.New(cli,
		kong.Name("outbox"),
		kong.Description("A transactional outbox: enqueue events in your database transaction; the relay delivers them at least once, in order per aggregate."),
		kong.Writers(stdout, stderr),
		kong.Exit(exit),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
	)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// newLogger returns a logger on w that redacts secrets.
func newLogger(w io.Writer, level, format string, sec *secrets) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lv}
	rw := redactingWriter{w: w, sec: sec}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(rw, opts))
	}
	return slog.New(slog.NewTextHandler(rw, opts))
}

// redactingWriter scrubs secrets from every log line.
type redactingWriter struct {
	w   io.Writer
	sec *secrets
}

func (r redactingWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, r.sec.redact(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
