package zookeeper

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// collect applies watch responses to a map until cond holds on it.
func collect(t *testing.T, w <-chan core.WatchResponse, state map[string]string, what string, cond func(resets int) bool) int {
	t.Helper()
	resets := 0
	paging := false // within a Reset's pages
	timeout := time.After(15 * time.Second)
	for !cond(resets) || paging {
		select {
		case r, ok := <-w:
			if !ok {
				t.Fatalf("watch closed waiting for %s", what)
			}
			if r.Reset && !paging {
				resets++
				for k := range state {
					delete(state, k)
				}
			}
			paging = r.Reset && r.Partial
			for _, ev := range r.Events {
				if ev.Type == core.EventDeleted {
					delete(state, ev.Path)
				} else {
					state[ev.Path] = string(ev.Data)
				}
			}
		case <-timeout:
			t.Fatalf("timed out waiting for %s; state %v", what, state)
		}
	}
	return resets
}

// TestWatchResetAfterExpiry: a watch from a revision starts with a Reset.
// The watch has a connection and session of its own: the watching
// client's session expiring does not stop it. When the watch's own
// connection is lost (its persistent watch with it), the watch opens
// another, sends a Reset with the current state, and goes on.
func TestWatchResetAfterExpiry(t *testing.T) {
	o := testOptions(t)
	wc, wr := open(t, o), open(t, o)
	ctx := testutil.Context(t, 30*time.Second)
	conns := make(chan *snapConn, 4)
	streamWatchConn = func(sc *snapConn) { conns <- sc }
	t.Cleanup(func() { streamWatchConn = nil })
	res, err := wr.Txn(ctx, []core.Op{core.CreateOp("/w/a", []byte("1"), core.Persistent).WithParents()}, core.TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, "/w", res.Revision)
	if err != nil {
		t.Fatal(err)
	}
	first := <-w
	if !first.Reset || first.Partial || len(first.Events) != 2 || first.Events[0].Path != "/w" || first.Events[1].Path != "/w/a" || first.Revision < res.Revision {
		t.Fatalf("first response: %+v", first)
	}
	state := map[string]string{"/w": "", "/w/a": "1"}
	if err := wc.ExpireSession(ctx); err != nil {
		t.Fatal(err)
	}
	// A change made while the watcher's client replaced its session.
	if _, err := core.Set(ctx, wr, "/w/a", []byte("2"), core.AnyVersion, core.Fence{}); err != nil {
		t.Fatal(err)
	}
	if resets := collect(t, w, state, "/w/a=2 after the client's session expired", func(int) bool { return state["/w/a"] == "2" }); resets != 0 {
		t.Fatalf("%d Resets after the client's session expired, want none (the watch has its own)", resets)
	}
	// The watch's own connection is lost; a change made meanwhile comes
	// with the Reset.
	(<-conns).wire.dropConn()
	if _, err := core.Set(ctx, wr, "/w/a", []byte("3"), core.AnyVersion, core.Fence{}); err != nil {
		t.Fatal(err)
	}
	collect(t, w, state, "a Reset after the watch's connection was lost, with /w/a=3", func(resets int) bool { return resets > 0 && state["/w/a"] == "3" })
	if _, _, err := core.Create(ctx, wr, "/w/b", []byte("4"), core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	collect(t, w, state, "/w/b after the reset", func(int) bool { return state["/w/b"] == "4" })
}

// TestWatchConverges: many writers change, create and delete nodes at
// once, several levels deep; a watcher's copy ends equal to a snapshot.
func TestWatchConverges(t *testing.T) {
	o := testOptions(t)
	wc := open(t, o)
	ctx := testutil.Context(t, 30*time.Second)
	if _, _, err := core.Create(ctx, wc, "/c", nil, core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, "/c", 1)
	if err != nil {
		t.Fatal(err)
	}
	state := map[string]string{}
	collect(t, w, state, "the initial reset", func(resets int) bool { return resets == 1 })
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			b := open(t, o)
			for i := 0; i < 30; i++ {
				p := fmt.Sprintf("/c/g%d/n%d/leaf", g, i%5)
				switch i % 3 {
				case 0:
					core.Create(ctx, b, p, []byte(fmt.Sprint(i)), core.CreateOptions{MakeParents: true})
				case 1:
					core.Set(ctx, b, p, []byte(fmt.Sprint(i)), core.AnyVersion, core.Fence{})
				case 2:
					core.Delete(ctx, b, p, core.AnyVersion, core.Fence{})
				}
			}
		}(g)
	}
	wg.Wait()
	snap, err := wc.Snapshot(ctx, "/c")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, n := range snap.Nodes {
		want[n.Path] = string(n.Data)
	}
	collect(t, w, state, "convergence on the snapshot", func(int) bool { return fmt.Sprint(state) == fmt.Sprint(want) })
}

// TestWatchMissingPrefix: a watch on a prefix that does not exist yet
// reports it when it is created, and its deletion.
func TestWatchMissingPrefix(t *testing.T) {
	o := testOptions(t)
	wc := open(t, o)
	ctx := testutil.Context(t, 30*time.Second)
	w, err := wc.Watch(ctx, "/later/p", 0)
	if err != nil {
		t.Fatal(err)
	}
	state := map[string]string{}
	if _, err := wc.Txn(ctx, []core.Op{core.CreateOp("/later/p/x", []byte("x"), core.Persistent).WithParents()}, core.TxnOptions{}); err != nil {
		t.Fatal(err)
	}
	collect(t, w, state, "the prefix's creation", func(int) bool { return state["/later/p/x"] == "x" })
	if _, ok := state["/later"]; ok {
		t.Fatalf("event outside the prefix: %v", state)
	}
	if _, err := wc.Txn(ctx, []core.Op{core.DeleteOp("/later/p/x", core.AnyVersion), core.DeleteOp("/later/p", core.AnyVersion)}, core.TxnOptions{}); err != nil {
		t.Fatal(err)
	}
	collect(t, w, state, "the prefix's deletion", func(int) bool { return len(state) == 0 })
	if _, _, err := core.Create(ctx, wc, "/later/p", []byte("again"), core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	collect(t, w, state, "the prefix's re-creation", func(int) bool { return state["/later/p"] == "again" })
}

// TestWatchCancel: cancelling the context closes the channel.
func TestWatchCancel(t *testing.T) {
	wc := open(t, testOptions(t))
	ctx, cancel := context.WithCancel(testutil.Context(t, 30*time.Second))
	w, err := wc.Watch(ctx, "/", 0)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case _, ok := <-w:
		if ok {
			for range w {
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch not closed after cancel")
	}
}

// TestWatchSlowConsumerResets: a consumer that reads nothing while more
// paths change than the watch holds unread (maxWatchDirty, lowered here)
// holds back no writer; when it reads at last it gets a Reset (read again
// on a new connection) and ends with every node.
func TestWatchSlowConsumerResets(t *testing.T) {
	o := testOptions(t)
	wc, wr := open(t, o), open(t, o)
	ctx := testutil.Context(t, 60*time.Second)
	old := maxWatchDirty
	maxWatchDirty = 16
	t.Cleanup(func() { maxWatchDirty = old })
	if _, _, err := core.Create(ctx, wr, "/s", nil, core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, "/s", 0)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := 0; i < n; i++ {
		if _, _, err := core.Create(ctx, wr, fmt.Sprintf("/s/n%03d", i), []byte{byte(i)}, core.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	state := map[string]string{}
	resets := collect(t, w, state, fmt.Sprintf("all %d nodes", n), func(int) bool { return len(state) >= n })
	if resets == 0 {
		t.Fatalf("no Reset after %d paths changed with the consumer away (the watch holds %d unread)", n, maxWatchDirty)
	}
	for i := 0; i < n; i++ {
		if p := fmt.Sprintf("/s/n%03d", i); state[p] != string([]byte{byte(i)}) {
			t.Fatalf("%s: %q after the Reset", p, state[p])
		}
	}
}
