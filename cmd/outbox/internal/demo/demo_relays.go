package demo

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink"
)

// relayTimings are the relay settings the demo uses, shortened so that the
// scenario fits in a minute.
type relayTimings struct {
	batch        int
	poll         time.Duration
	lease        time.Duration // relay-1's (it is never killed)
	crashLease   time.Duration // relay-2's, the one that is killed
	backoffMin   time.Duration
	backoffMax   time.Duration
	sweep        time.Duration
	stopTimeout  time.Duration
	maxRetries   int
	httpTimeout  time.Duration
	kafkaTimeout time.Duration       // the kafka sink's produce_timeout
	breaker      relay.BreakerConfig // both relays'; scaled to the demo's timings
}

// breakerEnv is b as `outbox relay` environment variables.
func breakerEnv(b relay.BreakerConfig, env map[string]string) {
	env["OUTBOX_BREAKER_WINDOW"] = b.Window.String()
	env["OUTBOX_BREAKER_MIN_ATTEMPTS"] = fmt.Sprint(b.MinAttempts)
	env["OUTBOX_BREAKER_RATIO"] = fmt.Sprint(b.FailureRatio)
	env["OUTBOX_BREAKER_FAILING_FOR"] = b.FailingFor.String()
	env["OUTBOX_BREAKER_OPEN_MIN"] = b.OpenMin.String()
	env["OUTBOX_BREAKER_OPEN_MAX"] = b.OpenMax.String()
	env["OUTBOX_BREAKER_REFRESH"] = b.Refresh.String()
}

// inProcRelay is relay-1: in this process, the router relay on the
// outbox table and one relay per destination table.
type inProcRelay struct {
	r      *relay.Relay // the router: Notify wakes it after a commit
	sinks  []sink.Sink
	cancel context.CancelFunc
	done   chan error
	n      int
}

// startInProcRelay runs a relay on each of cfgs (whose sinks it takes
// over; cfgs[0] is the router) until stop.
func startInProcRelay(ctx context.Context, cfgs ...relay.Config) (*inProcRelay, error) {
	var rs []*relay.Relay
	for _, cfg := range cfgs {
		r, err := relay.New(cfg)
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &inProcRelay{r: rs[0], cancel: cancel, done: make(chan error, len(rs)), n: len(rs)}
	for i, r := range rs {
		p.sinks = append(p.sinks, cfgs[i].Sink)
		go func() { p.done <- r.Run(ctx) }()
	}
	return p, nil
}

// stop stops the relays cleanly (each finishes its batch and marks it)
// and closes their sinks.
func (p *inProcRelay) stop() error {
	p.cancel()
	var err error
	for range p.n {
		if e := <-p.done; err == nil {
			err = e
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, sk := range p.sinks {
		if cerr := sk.Close(ctx); err == nil {
			err = cerr
		}
	}
	return err
}

// childRelay is relay-2: `outbox relay` in a process of its own, so that
// it can be killed for real.
type childRelay struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// childRelayEnv returns the environment of relay-2: this process's, minus
// every OUTBOX_* setting, plus the relay's settings as OUTBOX_* variables
// (so that the DSN's password is not on a command line).
func childRelayEnv(settings map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OUTBOX_") && !strings.HasPrefix(kv, "OUTBOX_TEST_") {
			continue
		}
		env = append(env, kv)
	}
	// A test binary re-executed as the command (TestMain of cmd/outbox)
	// runs `outbox relay` instead of the tests with this set; the real
	// binary ignores it.
	env = append(env, "OUTBOX_TEST_EXEC_MAIN=1")
	for k, v := range settings {
		env = append(env, k+"="+v)
	}
	return env
}

// startChildRelay re-executes this program as `outbox relay` (this works
// under `go run` too: os.Executable is the built binary). Its WARN and
// ERROR log lines go to the console under the tag "relay-2"; onError sees
// its FAILED events instead of their log lines.
func startChildRelay(env []string, con *Console, redact func(string) string, onFailed func(failedLine)) (*childRelay, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program to start relay-2: %w", err)
	}
	cmd := exec.Command(exe, "relay")
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start relay-2 (%s relay): %w", exe, err)
	}
	c := &childRelay{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		forwardChildLog(stderr, con, redact, onFailed)
		c.err = cmd.Wait()
	}()
	return c, nil
}

func (c *childRelay) pid() int { return c.cmd.Process.Pid }

// kill sends SIGKILL: the process ends at once, without marking anything.
func (c *childRelay) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

// stop asks the relay to stop cleanly (SIGTERM) and kills it if it has not
// stopped after timeout.
func (c *childRelay) stop(timeout time.Duration) error {
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		c.kill()
		return nil
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.done:
		return c.err
	case <-t.C:
		c.kill()
		return fmt.Errorf("relay-2 did not stop within %s after SIGTERM; killed", timeout)
	}
}

var (
	logTimeAttr  = regexp.MustCompile(`^time=\S+ `)
	logRelayAttr = regexp.MustCompile(` relay_id=\S+`)
)

// failedMessage is the relay's ERROR log message for an event that ended
// FAILED. The demo shows such an event as one ALARM line instead: the log
// line holds every detail, on some 600 characters.
const failedMessage = "event FAILED and moved to the dead-letter table"

// failedLine is what the ALARM line of a FAILED event shows.
type failedLine struct {
	aggregateType, aggregateID, eventType, attempts, reason string
}

// alarmText is the one line the demo prints for a FAILED event.
func (f failedLine) alarmText(by string) string {
	return fmt.Sprintf("%s/%s %s FAILED after %s attempt(s), dead-lettered (%s): %s",
		f.aggregateType, f.aggregateID, f.eventType, f.attempts, by, shorten(f.reason, 140))
}

// logAttr is one key=value of slog's text format; quoted values are Go strings.
var logAttr = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S*)`)

// parseLogLine reads the attributes of a line in slog's text format.
func parseLogLine(line string) map[string]string {
	attrs := map[string]string{}
	for _, m := range logAttr.FindAllStringSubmatch(line, -1) {
		v := m[2]
		if strings.HasPrefix(v, `"`) {
			if u, err := strconv.Unquote(v); err == nil {
				v = u
			}
		}
		attrs[m[1]] = v
	}
	return attrs
}

// forwardChildLog prints relay-2's log lines (text format, WARN and up) on
// the console, without their time and relay_id; the line of a FAILED
// event goes to onFailed instead.
func forwardChildLog(r io.Reader, con *Console, redact func(string) string, onFailed func(failedLine)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := redact(sc.Text())
		line = logRelayAttr.ReplaceAllString(logTimeAttr.ReplaceAllString(line, ""), "")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if a := parseLogLine(line); a["msg"] == failedMessage && onFailed != nil {
			onFailed(failedLine{a["aggregate_type"], a["aggregate_id"], a["event_type"], a["attempts"], a["reason"]})
			continue
		}
		con.Printf("relay-2", "%s", line)
	}
	_, _ = io.Copy(io.Discard, r)
}

// dropFailedLines leaves out the log record of a FAILED event: relay-1's
// OnFailed callback prints it as one ALARM line.
type dropFailedLines struct{ slog.Handler }

func (h dropFailedLines) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == failedMessage {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h dropFailedLines) WithAttrs(as []slog.Attr) slog.Handler {
	return dropFailedLines{h.Handler.WithAttrs(as)}
}

func (h dropFailedLines) WithGroup(name string) slog.Handler {
	return dropFailedLines{h.Handler.WithGroup(name)}
}

// consoleLogger returns a logger that prints WARN and ERROR lines on the
// console under tag, in slog's text format without time and relay_id.
func consoleLogger(con *Console, tag string, redact func(string) string) *slog.Logger {
	w := &consoleLineWriter{con: con, tag: tag, redact: redact}
	return slog.New(dropFailedLines{slog.NewTextHandler(w, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == "relay_id") {
				return slog.Attr{}
			}
			return a
		},
	})})
}

// consoleLineWriter turns each written log line into a console line.
type consoleLineWriter struct {
	mu     sync.Mutex
	con    *Console
	tag    string
	redact func(string) string
}

func (w *consoleLineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.con.Printf(w.tag, "%s", w.redact(line))
	}
	return len(p), nil
}
