package amqpsink_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/txoutbox/outbox/internal/testenv"
)

// rabbitNode is a private RabbitMQ node for a test that must stop or
// reconfigure its broker, so that the shared one is never touched: a node
// name of its own (outbox-test-<random>@localhost), its own AMQP and
// distribution ports on 127.0.0.1, its database, logs and Erlang cookie
// (HOME) in the test's temporary directory, no plugins, and a config file
// of its own (the machine's /etc/rabbitmq is not read). It is killed when
// the test ends, pass or fail, and dies with the test process should that
// be killed first.
type rabbitNode struct {
	Name string // Erlang node name, for rabbitmqctl -n
	URL  string // amqp://guest:guest@127.0.0.1:<port>/
	dir  string
	env  []string
	ctl  string // the rabbitmqctl script
	cmd  *exec.Cmd
	done chan struct{}
	log  testenv.Buffer
}

// RabbitMQ's own scripts; Debian's /usr/sbin wrappers run them as the
// rabbitmq user, which cannot write the test's directory.
func rabbitScript(name string) (string, error) {
	if p := filepath.Join("/usr/lib/rabbitmq/bin", name); fileExists(p) {
		return p, nil
	}
	return exec.LookPath(name)
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// startRabbitNode starts a private node with the extra rabbitmq.conf lines
// given (e.g. "max_message_size = 1048576") and returns once it accepts
// AMQP connections. It skips the test when RabbitMQ is not installed; a
// node that does not start fails the test under CI=true, and skips it
// elsewhere, saying why.
func startRabbitNode(t testing.TB, conf ...string) *rabbitNode {
	t.Helper()
	server, err := rabbitScript("rabbitmq-server")
	if err != nil {
		t.Skipf("this test needs a private RabbitMQ node, and rabbitmq-server is not installed (%v); the shared broker is never restarted or reconfigured", err)
	}
	ctl, err := rabbitScript("rabbitmqctl")
	if err != nil {
		t.Skipf("this test needs a private RabbitMQ node, and rabbitmqctl is not installed (%v)", err)
	}
	ports := testenv.FreePorts(t, 2)
	n := &rabbitNode{
		Name: "outbox-test-" + uniq() + "@localhost",
		URL:  fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", ports[0]),
		dir:  t.TempDir(),
		ctl:  ctl,
		done: make(chan struct{}),
	}
	files := map[string]string{
		"enabled_plugins":   "[].\n", // no management or prometheus listeners
		"rabbitmq-env.conf": "",      // instead of /etc/rabbitmq/rabbitmq-env.conf
		"rabbitmq.conf": strings.Join(append([]string{
			fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d", ports[0]),
			"log.console = false",
			"log.file.level = warning",
		}, conf...), "\n") + "\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(n.dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n.env = append(cleanEnv(),
		"HOME="+n.dir, // the node's and rabbitmqctl's Erlang cookie
		"RABBITMQ_NODENAME="+n.Name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		fmt.Sprintf("RABBITMQ_NODE_PORT=%d", ports[0]),
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d", ports[1]),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(n.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(n.dir, "log"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(n.dir, "enabled_plugins"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(n.dir, "rabbitmq.conf"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(n.dir, "rabbitmq-env.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(n.dir, "advanced.config"),
		"RABBITMQ_PID_FILE="+filepath.Join(n.dir, "node.pid"),
		// One scheduler of each kind, none of them spinning while idle:
		// Erlang's schedulers busy-wait by default, which on a busy
		// machine with few cores takes the CPU the node needs to boot.
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1} "+
			"+S 1:1 +SDcpu 1:1 +SDio 1 +sbwt none +sbwtdcpu none +sbwtdio none",
		"ERL_EPMD_ADDRESS=127.0.0.1",
		// The script then execs the Erlang VM, which so stays this
		// process: Pdeathsig kills it with the test process. Its shell
		// reads a pipe that nothing writes.
		"RABBITMQ_ALLOW_INPUT=1",
	)
	n.cmd = exec.Command(server)
	n.cmd.Dir = n.dir
	n.cmd.Env = n.env
	n.cmd.Stdout, n.cmd.Stderr = &n.log, &n.log
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := n.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.cmd.Start(); err != nil {
		t.Skipf("start a private RabbitMQ node: %v", err)
	}
	favour(syscall.PRIO_PGRP, n.cmd.Process.Pid) // its own process group (Setpgid)
	go func() { _ = n.cmd.Wait(); close(n.done) }()
	t.Cleanup(func() {
		n.kill()
		stdin.Close()
	})
	// Erlang boots a node in seconds on a quiet machine, but far slower
	// on a busy one: the bound is for a node that hangs.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := n.awaitAMQP(ctx); err != nil {
		msg := fmt.Sprintf("the private RabbitMQ node %s did not start: %v\n%s", n.Name, err, n.logTail())
		if testenv.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return n
}

// kill stops the node's whole process group at once: its data is thrown
// away with the test's directory.
func (n *rabbitNode) kill() {
	select {
	case <-n.done:
		return
	default:
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
	}
}

// awaitAMQP waits until the node accepts AMQP connections.
func (n *rabbitNode) awaitAMQP(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-n.done: // the node exited: stop waiting
			cancel()
		case <-ctx.Done():
		}
	}()
	err := waitForBroker(ctx, n.URL)
	select {
	case <-n.done:
		return fmt.Errorf("the node exited (%v)", n.cmd.ProcessState)
	default:
	}
	return err
}

// rabbitmqctl runs rabbitmqctl -n <node> args... and fails the test on
// an error.
func (n *rabbitNode) rabbitmqctl(t testing.TB, args ...string) string {
	t.Helper()
	// start_app on a busy machine can take minutes: the bound is for a
	// node that hangs, not for a slow one.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.ctl, append([]string{"-n", n.Name}, args...)...)
	cmd.Env, cmd.Dir = n.env, n.dir
	var out testenv.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Start()
	if err == nil {
		favour(syscall.PRIO_PROCESS, cmd.Process.Pid) // rabbitmqctl boots an Erlang VM of its own
		err = cmd.Wait()
	}
	if err != nil {
		t.Fatalf("rabbitmqctl -n %s %s: %v\n%s", n.Name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// favour raises the CPU priority of a process (which: PRIO_PROCESS or
// PRIO_PGRP; who: a pid or a process group), and of the threads and
// processes it starts, above the test binaries' (nice -5), where this
// process may (as root, in CI; elsewhere it is a no-op). A test waits on
// its private node, which must not lose the CPU it needs to boot to the
// -race test binaries running beside it.
func favour(which, who int) {
	_ = syscall.Setpriority(which, who, -5)
}

// restart stops and starts the RabbitMQ application of the node (the
// Erlang VM keeps running) and returns once it accepts connections again.
func (n *rabbitNode) restart(ctx context.Context, t testing.TB) error {
	n.rabbitmqctl(t, "stop_app")
	n.rabbitmqctl(t, "start_app")
	return n.awaitAMQP(ctx)
}

func (n *rabbitNode) logTail() string {
	s := n.log.String()
	if b, err := os.ReadFile(filepath.Join(n.dir, "log", n.Name+".log")); err == nil {
		s += string(b)
	}
	if len(s) > 4000 {
		s = "..." + s[len(s)-4000:]
	}
	return s
}

// cleanEnv is this process's environment without RabbitMQ and Erlang
// settings, so that the node takes only its own.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RABBITMQ_") && !strings.HasPrefix(kv, "ERL_") && !strings.HasPrefix(kv, "HOME=") {
			out = append(out, kv)
		}
	}
	return out
}
