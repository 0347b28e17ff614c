package testenv

import (
	"net"
	"os/exec"
	"strconv"
	"testing"
)

// TestFreePortBelowEphemeralRange: the ports are outside the range the
// kernel gives outgoing connections, free to listen on, and not handed
// out twice while this process runs.
func TestFreePortBelowEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	seen := map[int]bool{}
	for _, p := range FreePorts(t, 20) {
		if p < privatePortLow || p >= low {
			t.Errorf("port %d is outside %d-%d (below the ephemeral range, which starts at %d)", p, privatePortLow, low-1, low)
		}
		if seen[p] {
			t.Errorf("port %d handed out twice", p)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		ln.Close()
	}
}

// TestFreePortLockedAcrossProcesses: a port this process took is locked
// for other processes (flock(1) stands in for another test process).
func TestFreePortLockedAcrossProcesses(t *testing.T) {
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skip("flock(1) is not installed")
	}
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(flock, "--nonblock", "--exclusive", lockDir()+"/"+strconv.Itoa(p), "true").CombinedOutput()
	if err == nil {
		t.Fatalf("another process took the lock of port %d, which this process holds: %s", p, out)
	}
	if _, err := lockPort(lockDir(), p); err == nil {
		t.Fatalf("this process locked port %d twice", p)
	}
}
