// Package gossip is the coordinators' membership gossip: a SWIM-style
// member list (github.com/hashicorp/memberlist) over TCP and UDP on one
// port, in which every member carries a small opaque metadata value. The
// coordinator puts its client address and role in it (see
// coordinator.Options.Gossip); this package knows nothing of what the
// value means.
//
// Gossip only tells who is out there. It never decides anything: it does
// not add or remove Raft voters, elect a leader or fence a write.
package gossip

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// MaxMetaSize is the largest metadata value a member may carry (the
// member list's limit).
const MaxMetaSize = memberlist.MetaMaxSize

// Sentinel errors.
var (
	// ErrMetaTooLarge: a metadata value above MaxMetaSize.
	ErrMetaTooLarge = errors.New("gossip: metadata too large")
	// ErrClosed: the node was closed.
	ErrClosed = errors.New("gossip: closed")
)

// Options configure a Node.
type Options struct {
	// Name is the member's unique name (the coordinator id). Required.
	Name string
	// BindAddr is the IP address to listen on (TCP and UDP); "" or
	// "0.0.0.0": every address. A host name is resolved.
	BindAddr string
	// Port is the port of both the TCP and the UDP listener; 0: any free
	// port (the same number for both).
	Port int
	// Key, when set, encrypts and authenticates every gossip message
	// (AES-GCM; 16, 24 or 32 bytes). Members with another key, or none,
	// cannot join. Nil: plaintext.
	Key []byte
	// Meta is the member's initial metadata value (at most MaxMetaSize).
	Meta []byte
	// Seeds returns the gossip addresses (host:port) to join. It is called
	// at start and again, every RejoinInterval, while the node knows no
	// other member, and every HealInterval while it does (see
	// HealInterval). Nil: the node only waits to be joined.
	Seeds func(ctx context.Context) []string
	// RejoinInterval is the pause between join attempts while the node is
	// alone; default 2s.
	RejoinInterval time.Duration
	// HealInterval: while the node knows other members, every HealInterval
	// it joins the seeds that are not among them, so that groups of
	// members a partition separated (neither alone) merge again once it
	// heals; default 30s.
	HealInterval time.Duration
	// Logger receives the member list's messages (its debug lines at Debug
	// level); default slog.Default().
	Logger *slog.Logger
	// Fast, for tests on loopback, shortens the failure detection (probe
	// every 200ms) so that a dead member is noticed within about a second.
	Fast bool
}

// Member is one live member as the local node sees it.
type Member struct {
	// Name is the member's Options.Name.
	Name string
	// Address is its gossip address, host:port.
	Address string
	// Meta is its metadata value; the caller must not modify it.
	Meta []byte
}

// Node is a running member. Its methods are safe for concurrent use.
type Node struct {
	ml     *memberlist.Memberlist
	name   string
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}

	closing atomic.Bool // set by Close: what the member list says now is debug
	addr    string      // the local gossip address, host:port

	// members are copies taken in the member list's event callbacks,
	// which it calls under its own lock: its Members() hands out nodes it
	// keeps modifying.
	mmu     sync.Mutex
	members map[string]Member

	mu     sync.Mutex
	meta   []byte
	closed bool
	kick   chan struct{} // the metadata changed: announce it
}

// Start starts a node: it binds the port (TCP and UDP), then joins the
// seeds in the background. Errors: ErrMetaTooLarge; the member list's
// (a port in use, a bad key length, an unresolvable BindAddr).
func Start(opts Options) (*Node, error) {
	if opts.Name == "" {
		return nil, errors.New("gossip: a member name is required")
	}
	if len(opts.Meta) > MaxMetaSize {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrMetaTooLarge, len(opts.Meta), MaxMetaSize)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.RejoinInterval <= 0 {
		opts.RejoinInterval = 2 * time.Second
	}
	if opts.HealInterval <= 0 {
		opts.HealInterval = 30 * time.Second
	}
	bind := opts.BindAddr
	if bind == "" {
		bind = "0.0.0.0"
	}
	if net.ParseIP(bind) == nil {
		ips, err := net.LookupIP(bind)
		if err != nil || len(ips) == 0 {
			return nil, fmt.Errorf("gossip: resolve bind address %q: %v", bind, err)
		}
		bind = ips[0].String()
	}
	n := &Node{name: opts.Name, log: opts.Logger, meta: bytes.Clone(opts.Meta), kick: make(chan struct{}, 1), done: make(chan struct{}),
		members: map[string]Member{}}
	conf := memberlist.DefaultLANConfig()
	conf.Name = opts.Name
	conf.BindAddr = bind
	conf.BindPort = opts.Port
	conf.AdvertisePort = opts.Port
	if ip := net.ParseIP(bind); ip != nil && !ip.IsUnspecified() {
		conf.AdvertiseAddr = bind
	}
	conf.SecretKey = opts.Key
	conf.Delegate = (*delegate)(n)
	conf.Events = (*events)(n)
	conf.Logger = log.New(&logWriter{l: opts.Logger, closing: &n.closing}, "", 0)
	if opts.Fast {
		conf.ProbeInterval = 200 * time.Millisecond
		conf.ProbeTimeout = 100 * time.Millisecond
		conf.GossipInterval = 50 * time.Millisecond
		conf.SuspicionMult = 2
		conf.PushPullInterval = 2 * time.Second
	}
	ml, err := memberlist.Create(conf)
	if err != nil {
		return nil, fmt.Errorf("gossip: listen on %s: %w", net.JoinHostPort(bind, strconv.Itoa(opts.Port)), err)
	}
	n.ml = ml
	n.addr = net.JoinHostPort(conf.AdvertiseAddr, strconv.Itoa(conf.AdvertisePort))
	if conf.AdvertiseAddr == "" {
		l := ml.LocalNode()
		n.addr = net.JoinHostPort(l.Addr.String(), strconv.Itoa(int(l.Port)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go n.run(ctx, opts)
	return n, nil
}

// run joins the seeds while alone, and announces metadata changes, each in
// its own goroutine (a join to an unreachable host may take the member
// list's TCP timeout).
func (n *Node) run(ctx context.Context, opts Options) {
	defer close(n.done)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-n.kick:
				if err := n.ml.UpdateNode(5 * time.Second); err != nil && ctx.Err() == nil {
					n.log.Debug("gossip: announcing new metadata did not complete", "err", err)
				}
			}
		}
	}()
	defer wg.Wait()
	if opts.Seeds == nil {
		<-ctx.Done()
		return
	}
	t := time.NewTimer(0)
	defer t.Stop()
	lastHeal := time.Now() // the first heal comes one HealInterval after the start
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			switch {
			case n.ml.NumMembers() <= 1:
				n.join(ctx, opts.Seeds(ctx))
			case time.Since(lastHeal) >= opts.HealInterval:
				lastHeal = time.Now()
				n.heal(ctx, opts.Seeds(ctx))
			}
			t.Reset(opts.RejoinInterval)
		}
	}
}

// heal joins the seeds that are not live members (by address): a group of
// members separated from the seeds' group by a partition that healed.
func (n *Node) heal(ctx context.Context, seeds []string) {
	known := map[string]bool{}
	for _, m := range n.Members() {
		known[m.Address] = true
	}
	var missing []string
	for _, s := range seeds {
		if !known[s] {
			missing = append(missing, s)
		}
	}
	if len(missing) == 0 || ctx.Err() != nil {
		return
	}
	before := n.ml.NumMembers()
	if _, err := n.ml.Join(missing); err != nil {
		n.log.Debug("gossip: a seed that is not a member did not answer", "seeds", missing, "err", err)
	}
	if after := n.ml.NumMembers(); after > before {
		n.log.Info("gossip: merged with members it did not see (a partition healed)", "through", missing, "members", after)
	}
}

func (n *Node) join(ctx context.Context, seeds []string) {
	self := n.Address()
	var targets []string
	for _, s := range seeds {
		if s != "" && s != self {
			targets = append(targets, s)
		}
	}
	if len(targets) == 0 || ctx.Err() != nil {
		return
	}
	joined, err := n.ml.Join(targets)
	if joined > 0 {
		n.log.Info("joined the coordinators' gossip", "through", targets, "members", n.ml.NumMembers())
		return
	}
	n.log.Debug("gossip: no seed answered; retrying", "seeds", targets, "err", err)
}

// Address returns the node's gossip address, host:port (the port bound).
func (n *Node) Address() string { return n.addr }

// Members returns the live members (the local node included), sorted by
// name. Members that left or were found dead are not listed; a member
// suspected of failure still is until it is declared dead.
func (n *Node) Members() []Member {
	n.mmu.Lock()
	out := make([]Member, 0, len(n.members))
	for _, m := range n.members {
		out = append(out, m)
	}
	n.mmu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// SetMeta replaces the node's metadata value and announces it to the
// other members in the background (the latest value wins). It copies meta.
// Errors: ErrMetaTooLarge, ErrClosed.
func (n *Node) SetMeta(meta []byte) error {
	if len(meta) > MaxMetaSize {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrMetaTooLarge, len(meta), MaxMetaSize)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	if bytes.Equal(meta, n.meta) {
		return nil
	}
	n.meta = bytes.Clone(meta)
	select {
	case n.kick <- struct{}{}:
	default:
	}
	return nil
}

// Close leaves the member list (telling the others, within timeout) and
// releases the port. It is safe to call more than once.
func (n *Node) Close(timeout time.Duration) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	n.closing.Store(true)
	n.cancel()
	<-n.done
	err := n.ml.Leave(timeout)
	return errors.Join(err, n.ml.Shutdown())
}

// delegate gives the member list the node's metadata; it carries no user
// messages or state.
type delegate Node

func (d *delegate) NodeMeta(limit int) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.meta) > limit {
		return nil
	}
	return bytes.Clone(d.meta)
}

func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// events keeps the members map (the member list calls it under its lock)
// and logs members joining and leaving (or found dead) at Info.
type events Node

func (e *events) put(m *memberlist.Node) {
	e.mmu.Lock()
	e.members[m.Name] = Member{Name: m.Name, Address: net.JoinHostPort(m.Addr.String(), strconv.Itoa(int(m.Port))), Meta: bytes.Clone(m.Meta)}
	e.mmu.Unlock()
}

func (e *events) NotifyJoin(m *memberlist.Node) {
	e.put(m)
	if m.Name != e.name {
		e.log.Info("gossip: member joined", "member", m.Name, "address", m.Address())
	}
}

func (e *events) NotifyLeave(m *memberlist.Node) {
	e.mmu.Lock()
	delete(e.members, m.Name)
	e.mmu.Unlock()
	if m.Name != e.name {
		e.log.Info("gossip: member left or failed", "member", m.Name, "address", m.Address())
	}
}

func (e *events) NotifyUpdate(m *memberlist.Node) { e.put(m) }

// logWriter turns the member list's "[LEVEL] memberlist: ..." lines into
// slog records; once the node is closing (its sockets closed under its
// last sends) every line is Debug.
type logWriter struct {
	l       *slog.Logger
	closing *atomic.Bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	level := slog.LevelInfo
	for prefix, lv := range map[string]slog.Level{"[DEBUG] ": slog.LevelDebug, "[INFO] ": slog.LevelDebug, "[WARN] ": slog.LevelWarn, "[ERR] ": slog.LevelError} {
		if len(line) >= len(prefix) && line[:len(prefix)] == prefix {
			level, line = lv, line[len(prefix):]
			break
		}
	}
	if w.closing.Load() {
		level = slog.LevelDebug
	}
	w.l.Log(context.Background(), level, line)
	return len(p), nil
}

var _ io.Writer = (*logWriter)(nil)
