package sinktest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// StallProxy forwards TCP connections to a server until Stall: from then
// on it keeps every connection open, reads what the client sends and
// forwards nothing either way, as a server that hangs (a frozen broker, a
// gateway that accepts and never answers). Connections made while it
// stalls are accepted and never forwarded. It closes at the end of the
// test.
type StallProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	stalled bool
	conns   []net.Conn
}

// StartStallProxy listens on a free local port and forwards to target
// (host:port).
func StartStallProxy(t testing.TB, target string) *StallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &StallProxy{ln: ln, target: target}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *StallProxy) Addr() string { return p.ln.Addr().String() }

// Stall stops forwarding; the connections stay open.
func (p *StallProxy) Stall() {
	p.mu.Lock()
	p.stalled = true
	p.mu.Unlock()
}

func (p *StallProxy) isStalled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalled
}

func (p *StallProxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

func (p *StallProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c)
		if p.isStalled() {
			go func() { _, _ = io.Copy(io.Discard, c) }()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.track(up)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies src to dst until Stall, then reads src and drops it.
func (p *StallProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.isStalled() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *StallProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}
