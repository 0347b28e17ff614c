package sinktest

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy on a port of its own that nothing listens on (a
// connection is refused, as to a server that is down) until Open; then it
// forwards every connection to its target, until Close. It lets a test
// start a client while its server is "down" and bring the server "up"
// without touching the real one.
type Proxy struct {
	// Addr is the proxy's host:port, fixed from the start.
	Addr   string
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy reserves a port for a proxy to target (host:port) and returns
// it closed. It is closed at the end of the test.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, conns: map[net.Conn]struct{}{}}
	ln.Close()
	t.Cleanup(p.Close)
	return p
}

// Open starts listening on Addr and forwarding.
func (p *Proxy) Open() error {
	var ln net.Listener
	var err error
	for try := 0; try < 100; try++ { // the reserved port may linger briefly
		if ln, err = net.Listen("tcp", p.Addr); err == nil {
			break
		}
		t := time.NewTimer(20 * time.Millisecond)
		<-t.C
	}
	if err != nil {
		return fmt.Errorf("proxy: listen on %s: %w", p.Addr, err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go p.accept(ln)
	return nil
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, up) {
			return
		}
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// Close stops listening and cuts every forwarded connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	p.wg.Wait()
}

// ClosedAddr returns a host:port on which nothing listens (a port the
// system just handed out and took back), for a destination that is down.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
