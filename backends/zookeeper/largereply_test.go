package zookeeper

import (
	"bytes"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/internal/zktest"
)

// Replies over maxCallReply (4 MiB), which wire.call does not keep: the
// streamed watch's peek then reads the node with the library's Get, and
// the snapshot's fallback for servers before 3.6 with GetW or ChildrenW.
// ZooKeeper's default jute.maxbuffer (1 MiB) refuses a write of data that
// large, so these tests start a server of their own that accepts it.

// largeMaxBuffer is the jute.maxbuffer of largeServerOptions' server.
const largeMaxBuffer = 8 << 20

// justOverCallReply is a data length whose getData reply (the data's
// length prefix, the data, the stat) is one byte over maxCallReply.
const justOverCallReply = maxCallReply - 4 - zkStatSize + 1

// largeServerOptions starts a standalone server for t whose jute.maxbuffer
// is largeMaxBuffer, and returns options for a client of it under a fresh
// root. Like zktest.StartServer it skips t when ZooKeeper is not
// installed, and fails it under CI=true.
func largeServerOptions(t *testing.T) Options {
	t.Helper()
	srv := zktest.StartCluster(t, zktest.Options{JVMFlags: []string{fmt.Sprintf("-Djute.maxbuffer=%d", largeMaxBuffer)}})
	return optionsFor(t, srv.ConnectString())
}

// largeWriter is a plain go-zookeeper client of addr whose buffers take
// requests up to largeMaxBuffer (the backend refuses a write over
// maxRequestSize), closed at t's cleanup.
func largeWriter(t *testing.T, addr string) *zk.Conn {
	t.Helper()
	conn, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogger(discardLogger{}), zk.WithLogInfo(false),
		zk.WithMaxBufferSize(2*largeMaxBuffer), zk.WithMaxConnBufferSize(2*largeMaxBuffer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// randomData is n pseudo-random bytes drawn from seed.
func randomData(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// diffBytes is "" when got equals want, else their lengths and the first
// offset where they differ (large data is not printed).
func diffBytes(got, want []byte) string {
	if bytes.Equal(got, want) {
		return ""
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	return fmt.Sprintf("%d bytes, want %d; first difference at byte %d", len(got), len(want), i)
}

// nextResponse returns w's next response, failing t when w closes or none
// comes within 15 s.
func nextResponse(t *testing.T, w <-chan core.WatchResponse, what string) core.WatchResponse {
	t.Helper()
	select {
	case r, ok := <-w:
		if !ok {
			t.Fatalf("the watch closed waiting for %s", what)
		}
		return r
	case <-time.After(15 * time.Second):
		t.Fatalf("no response within 15s waiting for %s", what)
	}
	panic("unreachable")
}

// TestWatchStreamLargeData: a streamed watch (ZooKeeper 3.6+) of a prefix
// whose nodes' getData replies are over maxCallReply. Its Reset (read by
// pass 1 with the library's Get) holds the node with its exact data; a
// set of it and the create of another under the watch are reported by
// events (peek: wire.call cannot keep the reply, the library's Get reads
// it) with the exact data, the stat, and the revision of the write, on the
// watch's first connection (no Reset: not found by reading everything
// again on a new connection).
func TestWatchStreamLargeData(t *testing.T) {
	o := largeServerOptions(t)
	wc := open(t, o)
	raw := largeWriter(t, o.Address)
	ctx := testutil.Context(t, 30*time.Second)
	var conns atomic.Int32
	streamWatchConn = func(*snapConn) { conns.Add(1) }
	t.Cleanup(func() { streamWatchConn = nil })
	if justOverCallReply+4+zkStatSize <= maxCallReply {
		t.Fatalf("a getData reply for %d bytes of data is not over maxCallReply (%d)", justOverCallReply, maxCallReply)
	}

	first, second, third := randomData(1, justOverCallReply), randomData(2, justOverCallReply), randomData(3, 5<<20)
	if _, _, err := core.Create(ctx, wc, "/big", []byte("parent"), core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	za, zb := wc.zpath("/big/a"), wc.zpath("/big/b")
	if _, err := raw.Create(za, first, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create /big/a (%d bytes): %v", len(first), err)
	}
	_, ast, err := raw.Exists(za)
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, "/big", ast.Mzxid)
	if err != nil {
		t.Fatal(err)
	}

	// The Reset, in pages.
	reset := map[string]core.WatchEvent{}
	for {
		r := nextResponse(t, w, "the Reset")
		if r.Err != nil || !r.Reset {
			t.Fatalf("response %d of the Reset: Reset %v, Err %v", len(reset), r.Reset, r.Err)
		}
		for _, ev := range r.Events {
			reset[ev.Path] = ev
		}
		if !r.Partial {
			break
		}
	}
	if len(reset) != 2 || reset["/big"].Type != core.EventCreated || string(reset["/big"].Data) != "parent" {
		t.Fatalf("the Reset has %d nodes (/big: %+v), want /big and /big/a", len(reset), reset["/big"].Type)
	}
	ra := reset["/big/a"]
	if d := diffBytes(ra.Data, first); d != "" || ra.Type != core.EventCreated {
		t.Fatalf("the Reset's /big/a (type %v): data %s", ra.Type, d)
	}
	if ra.Stat.DataLength != int32(len(first)) || ra.Stat.ModifyRevision != ast.Mzxid {
		t.Fatalf("the Reset's /big/a has stat %+v; want DataLength %d, ModifyRevision %d", ra.Stat, len(first), ast.Mzxid)
	}

	// Under the watch: /big/a set to other data as long, /big/b created
	// with more.
	sst, err := raw.Set(za, second, -1)
	if err != nil {
		t.Fatalf("set /big/a: %v", err)
	}
	if _, err := raw.Create(zb, third, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create /big/b (%d bytes): %v", len(third), err)
	}
	_, bst, err := raw.Exists(zb)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]core.WatchEvent{}
	for got["/big/a"].Path == "" || got["/big/b"].Path == "" {
		r := nextResponse(t, w, "the events of /big/a and /big/b")
		if r.Err != nil {
			t.Fatalf("the watch ended: %v", r.Err)
		}
		if r.Reset {
			t.Fatalf("a Reset after the writes (%d connections): the watch read the prefix again instead of the changed nodes", conns.Load())
		}
		for _, ev := range r.Events {
			if _, dup := got[ev.Path]; dup {
				t.Fatalf("%s reported twice (%v, then %v) for one write", ev.Path, got[ev.Path].Type, ev.Type)
			}
			got[ev.Path] = ev
		}
	}
	for _, c := range []struct {
		path string
		typ  core.EventType
		data []byte
		st   *zk.Stat
	}{
		{"/big/a", core.EventUpdated, second, sst},
		{"/big/b", core.EventCreated, third, bst},
	} {
		ev := got[c.path]
		if ev.Type != c.typ {
			t.Errorf("%s: event %v, want %v", c.path, ev.Type, c.typ)
		}
		if d := diffBytes(ev.Data, c.data); d != "" {
			t.Errorf("%s: the event's data is %s", c.path, d)
		}
		if ev.Revision != c.st.Mzxid || ev.Stat != convStat(c.st) {
			t.Errorf("%s: event at revision %d with stat %+v; want revision %d, stat %+v", c.path, ev.Revision, ev.Stat, c.st.Mzxid, convStat(c.st))
		}
	}
	if len(got) != 2 {
		t.Errorf("events for %d paths, want /big/a and /big/b only", len(got))
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("the watch opened %d connections, want 1 (none lost)", n)
	}
}

// TestStreamSnapshotFallbackLargeReplies: through the proxy that refuses
// addWatch as ZooKeeper 3.5 does, a streamed snapshot of a tree with
// replies over maxCallReply (a node's data one byte over, another's of
// 6 MiB with a child, a parent whose child list is over) holds every node
// exactly as written (paths, data), with the stats and revision of a
// snapshot read straight from the server. The proxy saw each of those
// replies asked for at least twice: by wire.call, which could not keep
// it, then by GetW or ChildrenW.
func TestStreamSnapshotFallbackLargeReplies(t *testing.T) {
	o := largeServerOptions(t)
	proxy := startRefusingProxy(t, o.Address)
	ro := o
	ro.Address = proxy.addr()
	direct, reader := open(t, o), open(t, ro)
	raw := largeWriter(t, o.Address)
	ctx := testutil.Context(t, 30*time.Second)

	want := map[string][]byte{"/f": []byte("f"), "/f/small": []byte("s"), "/f/wide": []byte("w"), "/f/huge/kid": []byte("k")}
	if _, err := direct.Txn(ctx, []core.Op{core.CreateOp("/f", want["/f"], core.Persistent),
		core.CreateOp("/f/small", want["/f/small"], core.Persistent), core.CreateOp("/f/wide", want["/f/wide"], core.Persistent)}, core.TxnOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		path string
		n    int
	}{{"/f/big", justOverCallReply}, {"/f/huge", 6 << 20}} {
		want[c.path] = randomData(int64(10+i), c.n)
		if _, err := raw.Create(direct.zpath(c.path), want[c.path], 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatalf("create %s (%d bytes): %v", c.path, c.n, err)
		}
	}
	if _, _, err := core.Create(ctx, direct, "/f/huge/kid", want["/f/huge/kid"], core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// /f/wide's children: names of 1000 bytes, enough that its
	// getChildren2 reply (a count, a length and a name per child, the
	// stat) is over maxCallReply.
	const kids, nameLen = 4200, 1000
	if size := 4 + kids*(4+nameLen) + zkStatSize; size <= maxCallReply {
		t.Fatalf("a child list of %d bytes is not over maxCallReply (%d)", size, maxCallReply)
	}
	var ops []core.Op
	for i := 0; i < kids; i++ {
		p := fmt.Sprintf("/f/wide/%04d%s", i, strings.Repeat("w", nameLen-4))
		want[p] = []byte(fmt.Sprint(i))
		ops = append(ops, core.CreateOp(p, want[p], core.Persistent))
		if len(ops) == 500 || i == kids-1 {
			if _, err := direct.Txn(ctx, ops, core.TxnOptions{}); err != nil {
				t.Fatalf("create /f/wide's children: %v", err)
			}
			ops = ops[:0]
		}
	}

	// The reads of the large replies through the proxy.
	var mu sync.Mutex
	asked := map[string]int{}
	large := map[string]int32{direct.zpath("/f/big"): opGetData, direct.zpath("/f/huge"): opGetData, direct.zpath("/f/wide"): opGetChildren2}
	hook := func(_, op int32, path string) {
		if want, ok := large[path]; ok && want == op {
			mu.Lock()
			asked[path]++
			mu.Unlock()
		}
	}
	proxy.hook.Store(&hook)
	got, pages, err := streamAll(ctx, reader, "/f", 1<<20)
	proxy.hook.Store(nil)
	if err != nil {
		t.Fatalf("streamed snapshot through the proxy: %v", err)
	}
	if n := proxy.refused.Load(); n < 1 {
		t.Fatalf("the proxy refused %d addWatch requests: the fallback was not taken", n)
	}
	mu.Lock()
	for p, op := range large {
		if asked[p] < 2 {
			t.Errorf("%s was asked for (opcode %d) %d times through the proxy; want at least 2 (wire.call, then the library)", p, op, asked[p])
		}
	}
	mu.Unlock()

	seen := map[string]bool{}
	for _, n := range got.Nodes {
		seen[n.Path] = true
		w, ok := want[n.Path]
		if !ok {
			t.Errorf("the snapshot has %s, which was not written", n.Path)
			continue
		}
		if d := diffBytes(n.Data, w); d != "" {
			t.Errorf("%s: data %s", n.Path, d)
		}
		if n.Stat.DataLength != int32(len(w)) {
			t.Errorf("%s: DataLength %d, want %d", n.Path, n.Stat.DataLength, len(w))
		}
	}
	missing := 0
	for p := range want {
		if !seen[p] {
			if missing++; missing <= 5 {
				t.Errorf("the snapshot lacks %.40s", p)
			}
		}
	}
	if missing > 0 || t.Failed() {
		t.Fatalf("the snapshot has %d nodes, lacks %d of the %d written", len(got.Nodes), missing, len(want))
	}
	ds, err := direct.Snapshot(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	if len(ds.Nodes) != len(got.Nodes) {
		t.Fatalf("the direct snapshot has %d nodes, the fallback's %d", len(ds.Nodes), len(got.Nodes))
	}
	for i, n := range got.Nodes {
		if d := ds.Nodes[i]; d.Path != n.Path || d.Stat != n.Stat {
			t.Fatalf("node %d: the fallback's %.40s has stat %+v, the direct snapshot's %.40s %+v", i, n.Path, n.Stat, d.Path, d.Stat)
		}
	}
	if got.Revision != ds.Revision {
		t.Fatalf("the fallback's snapshot is at revision %d, the direct one at %d, with no write between", got.Revision, ds.Revision)
	}
	t.Logf("%d nodes in %d pages at revision %d; large replies asked for %v", len(got.Nodes), pages, got.Revision, asked)
}
