package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// privatePortLow is the lowest port FreePort hands out.
const privatePortLow = 20000

// held keeps the lock files of the ports this process took open: a lock
// lasts as long as its file (an *os.File closes when it is collected).
var held struct {
	sync.Mutex
	files []*os.File
}

// FreePort returns a TCP port on 127.0.0.1, free now, for a private server
// that a test stops and starts again on the same port (a RabbitMQ node,
// redis-server, PostgreSQL, kfake, nats-server).
//
// A port the kernel picks (listening on port 0) lies in its ephemeral
// range (net.ipv4.ip_local_port_range), from which it also gives every
// outgoing connection its local port: while the server is down, a client
// socket anywhere on the machine can be given that port, and the restart
// fails with EADDRINUSE (a private RabbitMQ node's start_app, say, on a
// machine running other tests). FreePort takes a port below that range,
// which only an explicit bind uses, and locks it (a file in the temporary
// directory, flock) for as long as this process runs, so that no other
// test process that uses FreePort takes it meanwhile.
func FreePort() (int, error) {
	high := ephemeralLow()
	if high-privatePortLow < 1000 {
		return kernelPort() // no room below the ephemeral range
	}
	dir := lockDir()
	var lastErr error
	for range 200 {
		port := privatePortLow + rand.IntN(high-privatePortLow)
		f, err := lockPort(dir, port)
		if err != nil {
			lastErr = err
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			f.Close()
			lastErr = err
			continue
		}
		ln.Close()
		held.Lock()
		held.files = append(held.files, f)
		held.Unlock()
		return port, nil
	}
	return 0, fmt.Errorf("no free port in %d-%d after 200 tries (last: %v)", privatePortLow, high-1, lastErr)
}

// FreePorts returns n ports of FreePort, or fails the test.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for range n {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, p)
	}
	return ports
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768,
// Linux's default, when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low <= 0 {
		return 32768
	}
	return low
}

// lockDir is where the ports' lock files are: shared by every test
// process of every copy of the suite on the machine.
func lockDir() string {
	dir := os.TempDir() + "/outbox-test-ports"
	if os.MkdirAll(dir, 0o777) == nil {
		_ = os.Chmod(dir, 0o777|os.ModeSticky) // every user's tests share it
	}
	return dir
}

// kernelPort is a port the kernel picks: the fallback.
func kernelPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
