package zookeeper

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// TestWatchStreamPermissionRefused: a streamed watch (ZooKeeper 3.6+)
// whose read of a changed node is refused (ZooKeeper's NoAuth: the node's
// ACL was set, between the change and the read, to let only a digest user
// the watcher does not authenticate as read it) ends, as the watch's
// contract says (watchstream.go: "Any other failure (a permission
// refused, ...) ends the watch with a response whose Err says it"; a
// core.WatchResponse with Err is the last): a response whose Err is
// core.ErrPermissionDenied and names the node and ZooKeeper's refusal,
// then the channel closes. The node's
// data after the refused read is never reported, and the watch opened no
// second connection (a refusal is not a lost connection: reading the
// prefix again on a new one is refused again).
//
// The ACL changes while the proxy holds the watch's read of the node
// (its own getData, an xid of wire.call's), so the read is refused
// whatever the timing, on a server that checks ACLs on persistent watch
// events (3.8.4, 3.9.2) or not.
func TestWatchStreamPermissionRefused(t *testing.T) {
	o := testOptions(t)
	proxy := startRefusingProxy(t, o.Address)
	proxy.passAddWatch.Store(true)
	wo := o
	wo.Address = proxy.addr()
	direct, wc := open(t, o), open(t, wo)
	ctx := testutil.Context(t, 30*time.Second)
	var conns atomic.Int32
	streamWatchConn = func(*snapConn) { conns.Add(1) }
	t.Cleanup(func() { streamWatchConn = nil })
	if _, err := direct.Txn(ctx, []core.Op{core.CreateOp("/p/x", []byte("1"), core.Persistent).WithParents(),
		core.CreateOp("/p/y", []byte("1"), core.Persistent)}, core.TxnOptions{}); err != nil {
		t.Fatal(err)
	}
	owner, _, err := zk.Connect([]string{o.Address}, 10*time.Second, zk.WithLogger(discardLogger{}), zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(owner.Close)
	if err := owner.AddAuth("digest", []byte("owner:secret")); err != nil {
		t.Fatal(err)
	}
	zx := direct.zpath("/p/x")
	var fired atomic.Int32
	aclErr := make(chan error, 1)
	hook := func(xid, op int32, path string) {
		if op != opGetData || xid > firstCallXid || path != zx || fired.Add(1) != 1 {
			return
		}
		_, err := owner.SetACL(zx, zk.DigestACL(zk.PermAll, "owner", "secret"), -1)
		aclErr <- err
	}
	proxy.hook.Store(&hook)

	w, err := wc.Watch(ctx, "/p", 0)
	if err != nil {
		t.Fatal(err)
	}
	// The watch works: a change to /p/y is reported.
	if _, err := core.Set(ctx, direct, "/p/y", []byte("2"), core.AnyVersion, core.Fence{}); err != nil {
		t.Fatal(err)
	}
	for y := ""; y != "2"; {
		r := nextResponse(t, w, "/p/y=2")
		if r.Err != nil {
			t.Fatalf("the watch ended before the refusal: %v", r.Err)
		}
		for _, ev := range r.Events {
			if ev.Path == "/p/y" {
				y = string(ev.Data)
			}
		}
	}

	// /p/x changes; the watch's read of it is refused.
	if _, err := core.Set(ctx, direct, "/p/x", []byte("2"), core.AnyVersion, core.Fence{}); err != nil {
		t.Fatal(err)
	}
	var end core.WatchResponse
	timeout := time.After(10 * time.Second)
	for end.Err == nil {
		select {
		case r, ok := <-w:
			if !ok {
				t.Fatalf("the watch closed without a response with Err after its read of /p/x was refused")
			}
			for _, ev := range r.Events {
				if ev.Path == "/p/x" {
					t.Fatalf("/p/x reported (%v, %q) though the watch's read of it was refused", ev.Type, ev.Data)
				}
			}
			end = r
		case <-timeout:
			if fired.Load() == 0 {
				t.Fatalf("the watch did not read /p/x within 10s of its change")
			}
			t.Fatalf("no response with Err within 10s of the watch's read of /p/x being refused; the watch opened %d more connections meanwhile (a permission refused taken for a lost connection, retried)", conns.Load()-1)
		}
	}
	select {
	case err := <-aclErr:
		if err != nil {
			t.Fatalf("set /p/x's ACL: %v", err)
		}
	default:
		t.Fatalf("the watch ended (%v) before its read of /p/x was held", end.Err)
	}
	msg := end.Err.Error()
	if !errors.Is(end.Err, core.ErrPermissionDenied) || !strings.Contains(msg, "/p/x") || !strings.Contains(msg, zk.ErrNoAuth.Error()) {
		t.Fatalf("the watch ended with %q; want ErrPermissionDenied, the refusal (%q) of /p/x", msg, zk.ErrNoAuth.Error())
	}
	if end.Reset || len(end.Events) != 0 {
		t.Fatalf("the response with Err also holds %d events (Reset %v)", len(end.Events), end.Reset)
	}
	select {
	case r, ok := <-w:
		if ok {
			t.Fatalf("a response after the one with Err: %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the channel is not closed 5s after the response with Err")
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("the watch opened %d connections, want 1", n)
	}
	// The refusal is the server's: the watching client cannot read /p/x.
	if _, err := core.Get(ctx, wc, "/p/x"); !errors.Is(err, core.ErrPermissionDenied) {
		t.Fatalf("the watching client's Get of /p/x after its ACL was set: %v, want ErrPermissionDenied", err)
	}
}
