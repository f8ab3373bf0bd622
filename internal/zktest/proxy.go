package zktest

import (
	"fmt"
	"net"
	"sync"
	"testing"
)

// ProxyMode is what a Proxy does with connections.
type ProxyMode int

const (
	// Forward relays bytes both ways (the normal mode).
	Forward ProxyMode = iota
	// Refuse closes every open connection and closes new ones at once: the
	// client sees its connection reset and every reconnect fail fast.
	Refuse
	// Blackhole stops relaying: open connections stay open but silent, new
	// ones are accepted and never answered, as in a network partition. The
	// client notices only through its own timeouts.
	Blackhole
)

// Proxy is a loopback TCP proxy in front of one address, to cut a client
// off from its server and restore it. It is safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	mu    sync.Mutex
	mode  ProxyMode
	conns map[*proxyConn]struct{}
	wg    sync.WaitGroup
	done  bool
}

type proxyConn struct {
	client, server net.Conn
}

func (pc *proxyConn) close() {
	pc.client.Close()
	if pc.server != nil {
		pc.server.Close()
	}
}

// NewProxy starts a proxy to target on a free loopback port. The caller
// must Close it.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("zktest: proxy listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// StartProxy starts a proxy to target for t and closes it at t's cleanup.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := NewProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// SetMode switches the proxy's mode. Refuse and Blackhole close every open
// connection (Refuse) or freeze it (Blackhole); Forward lets new
// connections through again (frozen ones stay frozen until closed).
func (p *Proxy) SetMode(m ProxyMode) {
	p.mu.Lock()
	p.mode = m
	var victims []*proxyConn
	if m == Refuse {
		for pc := range p.conns {
			victims = append(victims, pc)
			delete(p.conns, pc)
		}
	}
	p.mu.Unlock()
	for _, pc := range victims {
		pc.close()
	}
}

// Cut is SetMode(Refuse): every connection is dropped and reconnects fail.
func (p *Proxy) Cut() { p.SetMode(Refuse) }

// Restore is SetMode(Forward), after also closing connections frozen by
// Blackhole so the client reconnects through a working path.
func (p *Proxy) Restore() {
	p.mu.Lock()
	var victims []*proxyConn
	if p.mode == Blackhole {
		for pc := range p.conns {
			victims = append(victims, pc)
			delete(p.conns, pc)
		}
	}
	p.mode = Forward
	p.mu.Unlock()
	for _, pc := range victims {
		pc.close()
	}
}

func (p *Proxy) currentMode() ProxyMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode, done := p.mode, p.done
		p.mu.Unlock()
		if done || mode == Refuse {
			c.Close()
			continue
		}
		pc := &proxyConn{client: c}
		if mode == Blackhole {
			p.track(pc)
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		pc.server = s
		if !p.track(pc) {
			continue
		}
		p.wg.Add(2)
		go p.pipe(pc, pc.client, pc.server)
		go p.pipe(pc, pc.server, pc.client)
	}
}

// track registers pc; false (and pc closed) when the proxy is closed.
func (p *Proxy) track(pc *proxyConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		pc.close()
		return false
	}
	p.conns[pc] = struct{}{}
	return true
}

func (p *Proxy) pipe(pc *proxyConn, from, to net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32*1024)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			if p.currentMode() == Blackhole {
				// Swallow: the partition drops packets. Keep reading so the
				// sender does not block, but relay nothing.
				continue
			}
			if _, werr := to.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
	pc.close()
}

// Close stops the proxy and closes every connection. Idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		return
	}
	p.done = true
	var victims []*proxyConn
	for pc := range p.conns {
		victims = append(victims, pc)
	}
	p.conns = map[*proxyConn]struct{}{}
	p.mu.Unlock()
	p.ln.Close()
	for _, pc := range victims {
		pc.close()
	}
	p.wg.Wait()
}
