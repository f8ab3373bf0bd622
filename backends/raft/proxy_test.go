package raft

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// proxy is a loopback TCP proxy in front of a member's Raft port; cutting
// it partitions the member from every inbound message. With a delay it
// holds every byte that long before passing it on (the message delay of a
// slow network or a loaded machine).
type proxy struct {
	l      net.Listener
	target string
	delay  time.Duration

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newProxy(t testing.TB, listen, target string, delay time.Duration) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("proxy listen %s: %v", listen, err)
	}
	p := &proxy{l: l, target: target, delay: delay, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.mu.Unlock()
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			if p.delay > 0 {
				delayedCopy(dst, src, p.delay)
			} else {
				_, _ = io.Copy(dst, src)
			}
			dst.Close()
			src.Close()
		}
		go pipe(up, c)
		go pipe(c, up)
	}
}

// setCut cuts (true) or heals (false) the proxy; cutting closes every open
// connection and refuses new ones.
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		p.conns = map[net.Conn]struct{}{}
	}
}

func (p *proxy) close() {
	p.l.Close()
	p.setCut(true)
	p.wg.Wait()
}

// delayedCopy copies src to dst, each read passed on delay after it was
// read, in order, until either side fails.
func delayedCopy(dst, src net.Conn, delay time.Duration) {
	type chunk struct {
		due time.Time
		b   []byte
	}
	chunks := make(chan chunk, 256)
	go func() {
		defer close(chunks)
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{time.Now().Add(delay), bytes.Clone(buf[:n])}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		time.Sleep(time.Until(c.due)) // the simulated delay itself
		if _, err := dst.Write(c.b); err != nil {
			src.Close()
			break
		}
	}
	for range chunks {
	}
}
