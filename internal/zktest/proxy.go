package zktest

import (
	"encoding/binary"
	"fmt"
	"io"
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
	// sessions: the proxy reads the ZooKeeper handshake of each
	// connection (StartSessionProxy); silenced are the sessions
	// SilenceSession froze (Blackhole) or CutSession cut (Refuse).
	sessions bool
	silenced map[int64]ProxyMode
}

type proxyConn struct {
	client, server net.Conn
	// session is the ZooKeeper session the connection carries, once its
	// handshake has been seen (0 before); frozen, set under Proxy.mu,
	// stops relaying on it, as Blackhole does for all.
	session int64
	frozen  bool
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
	p := &Proxy{target: target, ln: ln, conns: map[*proxyConn]struct{}{}, silenced: map[int64]ProxyMode{}}
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

// StartSessionProxy is StartProxy for ZooKeeper clients only: the proxy
// also reads each connection's handshake, to learn its session, so that
// SilenceSession and CutSession can single one session out.
func StartSessionProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p := StartProxy(t, target)
	p.mu.Lock()
	p.sessions = true
	p.mu.Unlock()
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

// SilenceSession (on a StartSessionProxy) blackholes one ZooKeeper
// session: its connections stay open but carry nothing, and a reconnect
// that asks for the session is accepted and never answered, as if that
// client alone were partitioned; other sessions' connections are relayed
// as before. The proxy learns a connection's session from its handshake
// (the session id in the client's ConnectRequest and the server's
// ConnectResponse).
func (p *Proxy) SilenceSession(id int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.silenced[id] = Blackhole
	for pc := range p.conns {
		if pc.session == id {
			pc.frozen = true
		}
	}
}

// CutSession closes the connections of a session SilenceSession froze and
// closes its reconnects at once (so that its client's Close returns
// without waiting out a timeout); other sessions are left alone.
func (p *Proxy) CutSession(id int64) {
	p.mu.Lock()
	var victims []*proxyConn
	for pc := range p.conns {
		if pc.session == id {
			victims = append(victims, pc)
			delete(p.conns, pc)
		}
	}
	p.silenced[id] = Refuse
	p.mu.Unlock()
	for _, pc := range victims {
		pc.close()
	}
}

// relaying reports whether pc may carry bytes now.
func (p *Proxy) relaying(pc *proxyConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode != Blackhole && !pc.frozen
}

// handshake reads the first frame from one side of pc (a ZooKeeper
// ConnectRequest from the client, a ConnectResponse from the server),
// notes the session id it names (at offset at in the frame's body) and
// returns the bytes read, to relay. A frame too short to hold a session
// id, or too long to be a handshake (the proxy may carry other protocols),
// is relayed as it is. A connection of a session CutSession cut fails.
func (p *Proxy) handshake(pc *proxyConn, from net.Conn, at int) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(from, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if n > maxHandshake {
		return head[:], nil
	}
	frame := make([]byte, 4+n)
	copy(frame, head[:])
	if _, err := io.ReadFull(from, frame[4:]); err != nil {
		return nil, err
	}
	if body := frame[4:]; len(body) >= at+8 {
		if id := int64(binary.BigEndian.Uint64(body[at:])); id != 0 {
			p.mu.Lock()
			pc.session = id
			mode, silenced := p.silenced[id]
			pc.frozen = pc.frozen || silenced
			p.mu.Unlock()
			if mode == Refuse {
				return nil, fmt.Errorf("zktest: proxy: session %#x is cut", id)
			}
		}
	}
	return frame, nil
}

// maxHandshake bounds a handshake frame (a ConnectRequest is 48 bytes
// and a little more).
const maxHandshake = 1 << 10

// Offsets of the session id in a ConnectRequest (after protocolVersion,
// lastZxidSeen and timeOut) and a ConnectResponse (after protocolVersion
// and timeOut).
const (
	requestSessionAt  = 4 + 8 + 4
	responseSessionAt = 4 + 4
)

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
		go p.pipe(pc, pc.client, pc.server, requestSessionAt)
		go p.pipe(pc, pc.server, pc.client, responseSessionAt)
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

// pipe relays from one side of pc to the other, after its handshake
// frame (whose session id is at offset at, see handshake).
func (p *Proxy) pipe(pc *proxyConn, from, to net.Conn, at int) {
	defer p.wg.Done()
	var err error
	p.mu.Lock()
	sessions := p.sessions
	p.mu.Unlock()
	if sessions {
		var frame []byte
		frame, err = p.handshake(pc, from, at)
		if err == nil && p.relaying(pc) {
			_, err = to.Write(frame)
		}
	}
	buf := make([]byte, 32*1024)
	for err == nil {
		var n int
		n, err = from.Read(buf)
		if n > 0 {
			if !p.relaying(pc) {
				// Swallow: the partition drops packets. Keep reading so the
				// sender does not block, but relay nothing.
				continue
			}
			if _, werr := to.Write(buf[:n]); werr != nil {
				break
			}
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
