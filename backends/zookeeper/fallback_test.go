package zookeeper

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
)

// The streamed snapshot's fallback for servers before 3.6 (one-shot
// watches instead of addWatch), against a live server: the reader's
// connections go through refusingProxy, which answers addWatch as
// ZooKeeper 3.5 does.

// refusingProxy relays ZooKeeper connections on loopback to a server and
// answers every addWatch request as ZooKeeper 3.5's
// UnimplementedRequestProcessor does: a reply header with the request's
// xid, the last zxid the server sent on that connection and
// ZUNIMPLEMENTED (-6), then it closes the connection. It is safe for
// concurrent use.
type refusingProxy struct {
	target  string
	ln      net.Listener
	refused atomic.Int64 // addWatch requests answered
	// passAddWatch, when set, forwards addWatch as any request (a 3.6+
	// server behind a proxy that only hooks).
	passAddWatch atomic.Bool
	// hook, when set, is called with each request's xid, opcode and, for
	// a read (getData, getChildren2, exists), its path, before the
	// request is forwarded; the connection waits for it.
	hook atomic.Pointer[func(xid, opcode int32, path string)]

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// zUnimplemented is ZooKeeper's ZUNIMPLEMENTED error code.
var zUnimplemented int32 = -6

// startRefusingProxy starts a proxy to target and closes it at t's
// cleanup.
func startRefusingProxy(t *testing.T, target string) *refusingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &refusingProxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *refusingProxy) addr() string { return p.ln.Addr().String() }

func (p *refusingProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			continue
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		rc := &relayConn{client: c, server: s}
		p.wg.Add(2)
		go p.up(rc)
		go p.down(rc)
	}
}

func (p *refusingProxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

// relayConn is one relayed connection.
type relayConn struct {
	client, server net.Conn
	lastZxid       atomic.Int64 // the last zxid of a reply header from the server
	wmu            sync.Mutex   // one frame at a time to the client
	refused        bool         // under wmu: the refusal went out, nothing more does
}

func (rc *relayConn) shut() {
	rc.client.Close()
	rc.server.Close()
}

// readFrame reads one length-prefixed frame, the prefix included.
func readFrame(r io.Reader) ([]byte, error) {
	var l [4]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(l[:])
	if n > 128<<20 {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	f := make([]byte, 4+n)
	copy(f, l[:])
	_, err := io.ReadFull(r, f[4:])
	return f, err
}

// up relays the client's frames to the server. The first is the connect
// request (no opcode); every later one starts with xid and opcode.
func (p *refusingProxy) up(rc *relayConn) {
	defer p.wg.Done()
	defer rc.shut()
	for first := true; ; first = false {
		f, err := readFrame(rc.client)
		if err != nil {
			return
		}
		if body := f[4:]; !first && len(body) >= 8 {
			xid := binary.BigEndian.Uint32(body[0:4])
			op := int32(binary.BigEndian.Uint32(body[4:8]))
			if op == opAddWatch && !p.passAddWatch.Load() {
				p.refused.Add(1)
				r := binary.BigEndian.AppendUint32(nil, 16)
				r = binary.BigEndian.AppendUint32(r, xid)
				r = binary.BigEndian.AppendUint64(r, uint64(rc.lastZxid.Load()))
				r = binary.BigEndian.AppendUint32(r, uint32(zUnimplemented))
				rc.wmu.Lock()
				rc.refused = true
				rc.client.Write(r)
				rc.wmu.Unlock()
				return // and close the connection, as 3.5 does
			}
			if h := p.hook.Load(); h != nil {
				path := ""
				if (op == opGetData || op == opGetChildren2 || op == opExists) && len(body) >= 12 {
					if l := int(binary.BigEndian.Uint32(body[8:12])); l >= 0 && len(body) >= 12+l {
						path = string(body[12 : 12+l])
					}
				}
				(*h)(int32(xid), op, path)
			}
		}
		if _, err := rc.server.Write(f); err != nil {
			return
		}
	}
}

// down relays the server's frames to the client, a whole frame at a time
// (so that a refusal goes between two of them). The first is the connect
// response; every later one starts with the reply header.
func (p *refusingProxy) down(rc *relayConn) {
	defer p.wg.Done()
	defer rc.shut()
	for first := true; ; first = false {
		f, err := readFrame(rc.server)
		if err != nil {
			return
		}
		if !first && len(f) >= 16 {
			if z := int64(binary.BigEndian.Uint64(f[8:16])); z > 0 {
				rc.lastZxid.Store(z)
			}
		}
		rc.wmu.Lock()
		if !rc.refused {
			_, err = rc.client.Write(f)
		}
		done := rc.refused || err != nil
		rc.wmu.Unlock()
		if done {
			return
		}
	}
}

// fallbackClients returns a client straight to the shared server and one
// (the reader) through a refusingProxy, both on the same root.
func fallbackClients(t *testing.T) (direct, reader *Backend, o Options, proxy *refusingProxy) {
	t.Helper()
	o = testOptions(t)
	proxy = startRefusingProxy(t, o.Address)
	ro := o
	ro.Address = proxy.addr()
	return open(t, o), open(t, ro), o, proxy
}

// history records the transactions committed under a test's prefix, with
// their revisions.
type history struct {
	mu   sync.Mutex
	txns []snapshotTxn
}

type snapshotTxn struct {
	rev int64
	ops []core.Op
}

// commit runs ops as one transaction on c and records it.
func (h *history) commit(ctx context.Context, c *Backend, ops ...core.Op) error {
	res, err := c.Txn(ctx, ops, core.TxnOptions{})
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.txns = append(h.txns, snapshotTxn{rev: res.Revision, ops: append([]core.Op(nil), ops...)})
	h.mu.Unlock()
	return nil
}

// replayedNode is a node's data and version by the history.
type replayedNode struct {
	data    string
	version int64
}

// at returns the state after the transactions at or below rev. Call it
// once every transaction has returned.
func (h *history) at(rev int64) map[string]replayedNode {
	h.mu.Lock()
	defer h.mu.Unlock()
	sort.Slice(h.txns, func(i, j int) bool { return h.txns[i].rev < h.txns[j].rev })
	state := map[string]replayedNode{}
	for _, t := range h.txns {
		if t.rev > rev {
			break
		}
		for _, op := range t.ops {
			switch op.Type {
			case core.OpCreate:
				state[op.Path] = replayedNode{data: string(op.Data)}
			case core.OpSet:
				state[op.Path] = replayedNode{data: string(op.Data), version: state[op.Path].version + 1}
			case core.OpDelete:
				delete(state, op.Path)
			}
		}
	}
	return state
}

// streamAll takes b's streamed snapshot of prefix in pages of pageBytes,
// failing when two pages name different revisions or a page is out of
// path order.
func streamAll(ctx context.Context, b *Backend, prefix string, pageBytes int) (core.Snapshot, int, error) {
	snap := core.Snapshot{Revision: -1}
	pages := 0
	err := b.StreamSnapshot(ctx, prefix, pageBytes, func(rev int64, nodes []core.Node) error {
		pages++
		if snap.Revision >= 0 && rev != snap.Revision {
			return fmt.Errorf("page %d at revision %d, the pages before at %d", pages, rev, snap.Revision)
		}
		snap.Revision = rev
		for _, n := range nodes {
			if k := len(snap.Nodes); k > 0 && snap.Nodes[k-1].Path >= n.Path {
				return fmt.Errorf("page %d: %s after %s: not in path order", pages, n.Path, snap.Nodes[k-1].Path)
			}
			n.Data = append([]byte(nil), n.Data...)
			if len(n.Data) == 0 {
				n.Data = nil
			}
			snap.Nodes = append(snap.Nodes, n)
		}
		return nil
	})
	return snap, pages, err
}

// sameNodes returns "" when got and want hold the same nodes (paths, data,
// stats), else the first difference.
func sameNodes(got, want []core.Node) string {
	for i := 0; i < len(got) || i < len(want); i++ {
		switch {
		case i >= len(got):
			return fmt.Sprintf("lacks %s (and %d more)", want[i].Path, len(want)-i-1)
		case i >= len(want):
			return fmt.Sprintf("has %s (and %d more) beyond the %d nodes wanted", got[i].Path, len(got)-i-1, len(want))
		case got[i].Path != want[i].Path:
			return fmt.Sprintf("node %d is %s, want %s", i, got[i].Path, want[i].Path)
		case !bytes.Equal(got[i].Data, want[i].Data):
			return fmt.Sprintf("%s: data %q, want %q", got[i].Path, got[i].Data, want[i].Data)
		case got[i].Stat != want[i].Stat:
			return fmt.Sprintf("%s: stat %+v, want %+v", got[i].Path, got[i].Stat, want[i].Stat)
		}
	}
	return ""
}

// snapshotStats records what the streamed snapshots read (snapshotDone)
// until t ends.
type snapshotStats struct {
	mu                         sync.Mutex
	rounds, overrides, spilled int
}

func recordSnapshots(t *testing.T) *snapshotStats {
	s := &snapshotStats{}
	snapshotDone = func(r, ov, sp int) {
		s.mu.Lock()
		s.rounds, s.overrides, s.spilled = r, ov, sp
		s.mu.Unlock()
	}
	t.Cleanup(func() { snapshotDone = nil })
	return s
}

func (s *snapshotStats) last() (rounds, overrides, spilled int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rounds, s.overrides, s.spilled
}

// TestStreamSnapshotFallbackTree: through a proxy that refuses addWatch as
// ZooKeeper 3.5 does, a streamed snapshot (in small pages) of a tree of a
// few thousand nodes (empty, small and large data, a deep chain, an
// ephemeral) holds exactly the nodes, data and stats, and the revision, of
// a snapshot read straight from the server (recursive watch); the proxy
// refused addWatch (the fallback ran) and pass 1 spilled every node.
func TestStreamSnapshotFallbackTree(t *testing.T) {
	direct, reader, _, proxy := fallbackClients(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stats := recordSnapshots(t)
	var h history
	ops := []core.Op{core.CreateOp("/f", []byte("root"), core.Persistent)}
	flush := func() {
		t.Helper()
		if err := h.commit(ctx, direct, ops...); err != nil {
			t.Fatal(err)
		}
		ops = ops[:0]
	}
	for d := 0; d < 20; d++ {
		dir := fmt.Sprintf("/f/d%02d", d)
		ops = append(ops, core.CreateOp(dir, []byte(dir), core.Persistent))
		for n := 0; n < 100; n++ {
			var data []byte
			if n%3 != 0 {
				data = []byte(strings.Repeat(strconv.Itoa(n), n))
			}
			ops = append(ops, core.CreateOp(fmt.Sprintf("%s/n%03d", dir, n), data, core.Persistent))
		}
		flush()
	}
	deep := "/f/deep"
	ops = append(ops, core.CreateOp(deep, nil, core.Persistent))
	for i := 0; i < 12; i++ {
		deep += fmt.Sprintf("/l%d", i)
		ops = append(ops, core.CreateOp(deep, []byte{byte(i)}, core.Persistent))
	}
	ops = append(ops, core.CreateOp("/f/large", bytes.Repeat([]byte("L"), 300<<10), core.Persistent),
		core.CreateOp("/f/eph", []byte("session"), core.Ephemeral))
	flush()
	if _, err := core.Set(ctx, direct, "/f/d03/n001", []byte("set twice"), core.AnyVersion, core.Fence{}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.Set(ctx, direct, "/f/d03/n001", []byte("set again"), core.AnyVersion, core.Fence{}); err != nil {
		t.Fatal(err)
	}

	got, pages, err := streamAll(ctx, reader, "/f", 4<<10)
	if err != nil {
		t.Fatalf("streamed snapshot through the proxy: %v", err)
	}
	_, _, spilled := stats.last()
	if n := proxy.refused.Load(); n < 1 {
		t.Fatalf("the proxy refused %d addWatch requests: the fallback was not taken", n)
	}
	want, err := direct.Snapshot(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	if diff := sameNodes(got.Nodes, want.Nodes); diff != "" {
		t.Fatalf("the fallback's snapshot differs from the direct one: %s", diff)
	}
	if got.Revision != want.Revision {
		t.Fatalf("the fallback's snapshot is at revision %d, the direct one at %d, with no write between", got.Revision, want.Revision)
	}
	if spilled != len(want.Nodes) {
		t.Fatalf("pass 1 spilled %d nodes, want all %d", spilled, len(want.Nodes))
	}
	if pages < 10 {
		t.Fatalf("%d pages of 4 KiB for %d nodes: not paged", pages, len(got.Nodes))
	}
	t.Logf("%d nodes in %d pages at revision %d; the proxy refused %d addWatch", len(got.Nodes), pages, got.Revision, proxy.refused.Load())
}

// TestStreamSnapshotFallbackUnderWrites: streamed snapshots through the
// refusing proxy, taken while writers commit transactions that each keep
// an invariant over several nodes (x+y stays 1000, y counts the items, an
// item is created or deleted with its child, in the same transaction),
// each finish, and each is exactly the state at its revision by the
// replayed history (every node's data and version, no other node), with
// the invariants holding. Writes commit during every snapshot, and the
// rounds read nodes again (the writes reached them).
//
// Each writer commits one transaction every writeEvery, without pause
// otherwise: the rounds end when one round passes without a write, and a
// round of the fallback is a round trip per level of the subtrees created
// meanwhile (three here), so writers as fast as the server goes (over a
// thousand transactions a second here) keep a two-core machine's rounds
// from ever being quiet.
func TestStreamSnapshotFallbackUnderWrites(t *testing.T) {
	direct, reader, o, proxy := fallbackClients(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stats := recordSnapshots(t)
	const writers, total, writeEvery = 3, 1000, 20 * time.Millisecond
	var h history
	ops := []core.Op{core.CreateOp("/f", nil, core.Persistent), core.CreateOp("/f/m", nil, core.Persistent)}
	for d := 0; d < 20; d++ {
		ops = append(ops, core.CreateOp(fmt.Sprintf("/f/m/d%02d", d), []byte("d"), core.Persistent))
		for n := 0; n < 100; n++ {
			ops = append(ops, core.CreateOp(fmt.Sprintf("/f/m/d%02d/n%03d", d, n), []byte(strings.Repeat("n", 100)), core.Persistent))
		}
		if err := h.commit(ctx, direct, ops...); err != nil {
			t.Fatal(err)
		}
		ops = ops[:0]
	}
	for w := 0; w < writers; w++ {
		base := fmt.Sprintf("/f/w%d", w)
		if err := h.commit(ctx, direct, core.CreateOp(base, nil, core.Persistent),
			core.CreateOp(base+"/x", []byte(strconv.Itoa(total)), core.Persistent),
			core.CreateOp(base+"/y", []byte("0"), core.Persistent),
			core.CreateOp(base+"/items", nil, core.Persistent)); err != nil {
			t.Fatal(err)
		}
	}

	var stop atomic.Bool
	var commits atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		c := open(t, o)
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := fmt.Sprintf("/f/w%d", w)
			rng := rand.New(rand.NewSource(int64(w)))
			var items []string
			tick := time.NewTicker(writeEvery)
			defer tick.Stop()
			for j := 0; !stop.Load() && ctx.Err() == nil; j++ {
				<-tick.C
				var ops []core.Op
				if len(items) < 20 || (len(items) < 60 && rng.Intn(2) == 0) {
					item := fmt.Sprintf("%s/items/i%06d", base, j)
					v := []byte(fmt.Sprintf("w%d-%d", w, j))
					ops = append(ops, core.CreateOp(item, v, core.Persistent), core.CreateOp(item+"/c", v, core.Persistent))
					items = append(items, item)
				} else {
					k := rng.Intn(len(items))
					item := items[k]
					ops = append(ops, core.DeleteOp(item+"/c", core.AnyVersion), core.DeleteOp(item, core.AnyVersion))
					items = append(items[:k], items[k+1:]...)
				}
				ops = append(ops, core.SetOp(base+"/x", []byte(strconv.Itoa(total-len(items))), core.AnyVersion),
					core.SetOp(base+"/y", []byte(strconv.Itoa(len(items))), core.AnyVersion))
				if err := h.commit(ctx, c, ops...); err != nil {
					errs <- fmt.Errorf("writer %d, transaction %d: %w", w, j, err)
					return
				}
				commits.Add(1)
			}
		}()
	}
	stopWriters := func() {
		stop.Store(true)
		wg.Wait()
	}
	defer stopWriters()

	const snapshots = 5
	var snaps []core.Snapshot
	reread := 0
	for i := 0; i < snapshots; i++ {
		before := commits.Load()
		start := time.Now()
		snap, pages, err := streamAll(ctx, reader, "/f", 16<<10)
		during := commits.Load() - before
		if err != nil {
			t.Fatalf("snapshot %d: %v", i, err)
		}
		if during == 0 {
			t.Fatalf("snapshot %d: no transaction committed while it read (the test proves nothing)", i)
		}
		rounds, overrides, spilled := stats.last()
		reread += overrides
		t.Logf("snapshot %d: %d nodes in %d pages at zxid %d in %v; %d transactions committed meanwhile; pass 1 spilled %d, %d rounds read %d nodes again",
			i, len(snap.Nodes), pages, snap.Revision, time.Since(start).Round(time.Millisecond), during, spilled, rounds, overrides)
		snaps = append(snaps, snap)
	}
	stopWriters()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if n := proxy.refused.Load(); n < snapshots {
		t.Fatalf("the proxy refused %d addWatch requests for %d snapshots: the fallback was not always taken", n, snapshots)
	}
	for i, snap := range snaps {
		want := h.at(snap.Revision)
		got := map[string]core.Node{}
		for _, n := range snap.Nodes {
			got[n.Path] = n
			if st := n.Stat; st.CreateRevision > snap.Revision || st.ModifyRevision > snap.Revision || st.ChildrenRevision > snap.Revision {
				t.Fatalf("snapshot %d at revision %d: %s has zxids %+v above it", i, snap.Revision, n.Path, st)
			}
			w, ok := want[n.Path]
			if !ok {
				t.Fatalf("snapshot %d at revision %d has %s, which the history has not at that revision", i, snap.Revision, n.Path)
			}
			if string(n.Data) != w.data || n.Stat.Version != w.version {
				t.Fatalf("snapshot %d at revision %d: %s is %q at version %d; the history says %q at version %d", i, snap.Revision, n.Path, n.Data, n.Stat.Version, w.data, w.version)
			}
		}
		for p := range want {
			if _, ok := got[p]; !ok {
				t.Fatalf("snapshot %d at revision %d lacks %s, which the history has at that revision", i, snap.Revision, p)
			}
		}
		for w := 0; w < writers; w++ {
			base := fmt.Sprintf("/f/w%d", w)
			x, _ := strconv.Atoi(string(got[base+"/x"].Data))
			y, _ := strconv.Atoi(string(got[base+"/y"].Data))
			items := 0
			for p, n := range got {
				if core.ParentPath(p) == base+"/items" {
					items++
					if c, ok := got[p+"/c"]; !ok || !bytes.Equal(c.Data, n.Data) {
						t.Fatalf("snapshot %d at revision %d: %s without its child (%v)", i, snap.Revision, p, ok)
					}
				}
			}
			if x+y != total || y != items {
				t.Fatalf("snapshot %d at revision %d: writer %d has x=%d y=%d and %d items; want x+y=%d and y=items", i, snap.Revision, w, x, y, items, total)
			}
		}
	}
	if reread == 0 {
		t.Fatalf("no round read a node again in %d snapshots under writes: the rounds were not exercised", snapshots)
	}
}

// TestStreamSnapshotFallbackPass1Changes: writes made in the middle of the
// fallback's pass 1 (the proxy holds the read of one node while they
// commit) are in the snapshot exactly as a read after them finds them: a
// subtree created in one transaction under a node already listed, a node
// deleted with its child, a node deleted and created again in one
// transaction with another child, a child created under a leaf, a data
// change, a node created and one deleted under a node listed but whose
// children are not read yet. The snapshot equals a direct snapshot taken
// after it (nodes, stats, revision), and the rounds read nodes again.
func TestStreamSnapshotFallbackPass1Changes(t *testing.T) {
	direct, reader, o, proxy := fallbackClients(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stats := recordSnapshots(t)
	var h history
	for _, top := range []string{"a", "z"} {
		ops := []core.Op{core.CreateOp("/f/"+top, nil, core.Persistent)}
		if top == "a" {
			ops = append([]core.Op{core.CreateOp("/f", nil, core.Persistent)}, ops...)
		}
		for i := 0; i < 300; i++ {
			n := fmt.Sprintf("/f/%s/n%03d", top, i)
			ops = append(ops, core.CreateOp(n, []byte(n), core.Persistent))
			if top == "a" {
				ops = append(ops, core.CreateOp(n+"/c", []byte("c"), core.Persistent))
			}
		}
		if err := h.commit(ctx, direct, ops...); err != nil {
			t.Fatal(err)
		}
	}
	writes := [][]core.Op{
		{core.CreateOp("/f/a/new", []byte("new"), core.Persistent), core.CreateOp("/f/a/new/x", []byte("x"), core.Persistent),
			core.CreateOp("/f/a/new/x/y", []byte("y"), core.Persistent)},
		{core.DeleteOp("/f/a/n010/c", core.AnyVersion), core.DeleteOp("/f/a/n010", core.AnyVersion)},
		{core.DeleteOp("/f/a/n030/c", core.AnyVersion), core.DeleteOp("/f/a/n030", core.AnyVersion),
			core.CreateOp("/f/a/n030", []byte("again"), core.Persistent), core.CreateOp("/f/a/n030/d", []byte("d"), core.Persistent)},
		{core.CreateOp("/f/a/n040/c/g", []byte("g"), core.Persistent)},
		{core.SetOp("/f/a/n020", []byte("changed"), core.AnyVersion)},
		{core.DeleteOp("/f/z/n005", core.AnyVersion), core.CreateOp("/f/z/n999", []byte("z"), core.Persistent),
			core.CreateOp("/f/z/n999/k", []byte("k"), core.Persistent)},
		{core.DeleteOp("/f/z/n299", core.AnyVersion)},
	}
	// The writes go in when pass 1 reads /f/a/n150/c: after /f, /f/a and
	// /f/z were listed, before /f/z's children are read.
	trigger := o.Root + "/f/a/n150/c"
	var fired atomic.Int32
	hookErr := make(chan error, 1)
	hook := func(_, op int32, path string) {
		if op != opGetData || path != trigger || fired.Add(1) != 1 {
			return
		}
		for _, ops := range writes {
			if err := h.commit(ctx, direct, ops...); err != nil {
				hookErr <- err
				return
			}
		}
	}
	proxy.hook.Store(&hook)
	got, _, err := streamAll(ctx, reader, "/f", 8<<10)
	proxy.hook.Store(nil)
	if err != nil {
		t.Fatalf("streamed snapshot through the proxy: %v", err)
	}
	select {
	case err := <-hookErr:
		t.Fatalf("the writes during pass 1: %v", err)
	default:
	}
	if n := fired.Load(); n != 1 {
		t.Fatalf("pass 1 read %s %d times through the proxy, want once (the writes went in then)", trigger, n)
	}
	if n := proxy.refused.Load(); n < 1 {
		t.Fatalf("the proxy refused %d addWatch requests: the fallback was not taken", n)
	}
	rounds, overrides, spilled := stats.last()
	t.Logf("pass 1 spilled %d nodes; %d rounds read %d nodes again", spilled, rounds, overrides)
	want, err := direct.Snapshot(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	if diff := sameNodes(got.Nodes, want.Nodes); diff != "" {
		t.Fatalf("the fallback's snapshot differs from a direct one after it: %s", diff)
	}
	if got.Revision != want.Revision {
		t.Fatalf("the fallback's snapshot is at revision %d, a direct one after it at %d, with no write between", got.Revision, want.Revision)
	}
	// The same, against the history, node by node (clearer when one of the
	// changes is missed).
	state := h.at(got.Revision)
	has := map[string]string{}
	for _, n := range got.Nodes {
		has[n.Path] = string(n.Data)
	}
	for _, c := range []struct {
		path string
		in   bool
	}{
		{"/f/a/new/x/y", true}, {"/f/a/n010", false}, {"/f/a/n010/c", false}, {"/f/a/n030/d", true},
		{"/f/a/n030/c", false}, {"/f/a/n040/c/g", true}, {"/f/z/n005", false}, {"/f/z/n999/k", true}, {"/f/z/n299", false},
	} {
		if _, ok := has[c.path]; ok != c.in {
			t.Errorf("%s in the snapshot: %v, want %v", c.path, ok, c.in)
		}
	}
	if has["/f/a/n020"] != "changed" || has["/f/a/n030"] != "again" {
		t.Errorf("/f/a/n020 is %q, /f/a/n030 %q; want the data written during pass 1", has["/f/a/n020"], has["/f/a/n030"])
	}
	if len(state) != len(got.Nodes) {
		t.Errorf("the history has %d nodes at revision %d, the snapshot %d", len(state), got.Revision, len(got.Nodes))
	}
	if overrides == 0 {
		t.Fatalf("no round read a node again after writes during pass 1")
	}
}

// TestWatchFallback: through the proxy that refuses addWatch as ZooKeeper
// 3.5 does, a watch falls back to one-shot watches (the model of
// watch.go): its first response is a Reset of the prefix, and a create
// and a delete after it are reported.
func TestWatchFallback(t *testing.T) {
	direct, _, o, proxy := fallbackClients(t)
	// A reader of its own that keeps its log lines: the fallback says
	// what it costs, once.
	var logMu sync.Mutex
	var logs []string
	ro := o
	ro.Address = proxy.addr()
	ro.Logf = func(format string, args ...any) {
		logMu.Lock()
		logs = append(logs, fmt.Sprintf(format, args...))
		logMu.Unlock()
	}
	reader := open(t, ro)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := direct.Txn(ctx, []core.Op{core.CreateOp("/g", nil, core.Persistent), core.CreateOp("/g/a", []byte("1"), core.Persistent)}, core.TxnOptions{}); err != nil {
		t.Fatal(err)
	}
	ch, err := reader.Watch(ctx, "/g", 1)
	if err != nil {
		t.Fatal(err)
	}
	if n := proxy.refused.Load(); n < 1 {
		t.Fatalf("the proxy refused %d addWatch requests: the fallback was not taken", n)
	}
	first := <-ch
	if !first.Reset || first.Partial || len(first.Events) != 2 || first.Events[1].Path != "/g/a" || string(first.Events[1].Data) != "1" {
		t.Fatalf("first response %+v, want a Reset of /g and /g/a", first)
	}
	// A second watch on the same client falls back too, without a second
	// warning.
	wctx, wcancel := context.WithCancel(ctx)
	if _, err := reader.Watch(wctx, "/g", 0); err != nil {
		t.Fatal(err)
	}
	wcancel()
	logMu.Lock()
	warned := 0
	for _, l := range logs {
		if strings.Contains(l, "no persistent recursive watches") && strings.Contains(l, "keeps a copy of the subtree") {
			warned++
		}
	}
	logMu.Unlock()
	if warned != 1 {
		t.Errorf("the fallback warned %d times for two watches, want once; log: %q", warned, logs)
	}
	if _, _, err := core.Create(ctx, direct, "/g/b", []byte("2"), core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := core.Delete(ctx, direct, "/g/a", core.AnyVersion, core.Fence{}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]core.EventType{}
	for seen["/g/b"] != core.EventCreated || seen["/g/a"] != core.EventDeleted {
		select {
		case r, ok := <-ch:
			if !ok || r.Err != nil {
				t.Fatalf("watch ended: %v", r.Err)
			}
			for _, ev := range r.Events {
				seen[ev.Path] = ev.Type
			}
		case <-ctx.Done():
			t.Fatalf("events seen %v: want /g/b created and /g/a deleted", seen)
		}
	}
}
