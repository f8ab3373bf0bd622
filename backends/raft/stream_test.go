package raft

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/raft/fsm"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// TestSnapshotCatchUp: a voter that was down while the others took several
// snapshots and compacted their logs catches up from a streamed snapshot
// (checksummed, verified, then loaded).
func TestSnapshotCatchUp(t *testing.T) {
	c := startCluster(t, 3, func(i int, o *Options) { o.SnapshotThreshold = 20 })
	leader := c.waitLeader()
	lagger := (leader + 1) % 3
	cl := c.client(leader)
	ctx := testutil.Context(t, 20*time.Second)
	c.stop(lagger)
	for i := 0; i < 150; i++ {
		if _, _, err := core.Create(ctx, cl, fmt.Sprintf("/s/%03d", i), []byte{byte(i)}, core.CreateOptions{MakeParents: true}); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if err := c.start(lagger); err != nil {
		t.Fatalf("restart the lagging voter: %v", err)
	}
	testutil.WaitFor(t, 30*time.Second, "the lagging voter to catch up", func() bool {
		v, err := c.members[lagger].m.nh.StaleRead(shardID, fsm.ChildrenQuery{Path: "/s"})
		return err == nil && len(v.(*fsm.ChildrenAnswer).Names) == 150
	})
	// Once caught up it serves clients as usual.
	back := c.client(lagger)
	if names, _, err := back.Children(ctx, "/s", core.ReadOptions{}); err != nil || len(names) != 150 {
		t.Fatalf("linearizable children on the caught-up voter: %d names, %v", len(names), err)
	}
}

// TestChangeLogRetention: history older than coordinator.raft.change-log.
// retention fails with ErrCompacted; a snapshot and a fetch from its
// revision resume the stream.
func TestChangeLogRetention(t *testing.T) {
	c := startCluster(t, 1, func(i int, o *Options) { o.ChangeLogRetention = 20 })
	cl := c.client(0)
	ctx := testutil.Context(t, 20*time.Second)
	for i := 0; i < 40; i++ {
		if _, _, err := core.Create(ctx, cl, fmt.Sprintf("/r%02d", i), nil, core.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.Watch(ctx, "/", 1); !errors.Is(err, core.ErrCompacted) {
		t.Fatalf("watch from revision 1: got %v, want ErrCompacted", err)
	}
	if _, _, err := cl.FetchMetadata(ctx, 1, 10*time.Millisecond); !errors.Is(err, core.ErrCompacted) {
		t.Fatalf("fetch from revision 1: got %v, want ErrCompacted", err)
	}
	snap, err := cl.FetchMetadataSnapshot(ctx)
	if err != nil || len(snap.Nodes) != 40 {
		t.Fatalf("snapshot: %d nodes, %v", len(snap.Nodes), err)
	}
	st, _, err := core.Create(ctx, cl, "/next", nil, core.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evs, rev, err := cl.FetchMetadata(ctx, snap.Revision+1, time.Second)
	if err != nil || len(evs) != 1 || evs[0].Path != st || rev < evs[0].Revision {
		t.Fatalf("fetch after the snapshot: %+v rev %d %v", evs, rev, err)
	}
	// A long poll with nothing new returns empty after max-wait.
	start := time.Now()
	evs, rev2, err := cl.FetchMetadata(ctx, rev+1, 200*time.Millisecond)
	if err != nil || len(evs) != 0 || rev2 != rev {
		t.Fatalf("empty long poll: %+v %d %v", evs, rev2, err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("empty long poll returned after %v, want about max-wait", d)
	}
}

// TestMetadataStreamChaos: a follower of the metadata stream that always
// fetches from the current leader sees every change exactly once, in
// order, while leadership moves around.
func TestMetadataStreamChaos(t *testing.T) {
	c := startCluster(t, 3, nil)
	ctx := testutil.Context(t, 20*time.Second)
	clients := []*Client{c.client(0), c.client(1), c.client(2)}
	var mu sync.Mutex
	acked := map[string]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // writer
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p := fmt.Sprintf("/stream/%05d", i)
			wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, _, err := core.Create(wctx, clients[i%3], p, nil, core.CreateOptions{MakeParents: true})
			cancel()
			if err == nil {
				mu.Lock()
				acked[p] = true
				mu.Unlock()
			}
		}
	}()
	chaosDone := make(chan struct{})
	wg.Add(1)
	go func() { // chaos: move leadership around
		defer wg.Done()
		defer close(chaosDone)
		for round := 0; round < 6; round++ {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			l := c.leader()
			if l < 0 {
				continue
			}
			target := uint64((l+1)%3 + 1)
			_ = c.members[l].m.nh.RequestLeaderTransfer(shardID, target)
		}
	}()
	seen := map[string]bool{}
	var last int64
	from := int64(1)
	// Follow until the chaos is over and enough writes were acknowledged
	// through it (a busy machine acknowledges fewer per second), within a
	// bound.
	enough := func() bool {
		select {
		case <-chaosDone:
		default:
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 20
	}
	deadline := time.Now().Add(60 * time.Second)
	for !enough() && time.Now().Before(deadline) {
		l := c.leader()
		if l < 0 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		evs, rev, err := clients[l].FetchMetadata(ctx, from, 100*time.Millisecond)
		if err != nil {
			continue // leadership moved under us: fetch again from the same revision
		}
		for _, ev := range evs {
			if ev.Revision < last {
				t.Fatalf("event %s at revision %d after revision %d", ev.Path, ev.Revision, last)
			}
			last = ev.Revision
			if ev.Type == core.EventCreated && seen[ev.Path] {
				t.Fatalf("created %s seen twice", ev.Path)
			}
			seen[ev.Path] = true
		}
		from = rev + 1
	}
	close(stop)
	wg.Wait()
	// Drain what the writer's last writes added.
	for {
		l := c.waitLeader()
		evs, rev, err := clients[l].FetchMetadata(ctx, from, 50*time.Millisecond)
		if err != nil {
			continue
		}
		for _, ev := range evs {
			if ev.Type == core.EventCreated && seen[ev.Path] {
				t.Fatalf("created %s seen twice", ev.Path)
			}
			seen[ev.Path] = true
		}
		if len(evs) == 0 {
			break
		}
		from = rev + 1
	}
	mu.Lock()
	defer mu.Unlock()
	for p := range acked {
		if !seen[p] {
			t.Fatalf("acknowledged %s never seen on the stream", p)
		}
	}
	if len(acked) < 20 {
		t.Fatalf("only %d writes acknowledged during the chaos", len(acked))
	}
	t.Logf("%d acknowledged writes, %d paths seen, once each, in order", len(acked), len(seen))
}

// TestWatchBatchesAppliedWrites: concurrent writes applied while a watch
// is not being read reach it in fewer responses than writes (a watch read
// takes every change applied since the last one), each event exactly once
// and in revision order.
func TestWatchBatchesAppliedWrites(t *testing.T) {
	const writers, each = 32, 10
	c := startCluster(t, 1, nil)
	cl := c.client(c.waitLeader())
	ctx := testutil.Context(t, 20*time.Second)
	if _, _, err := core.Create(ctx, cl, "/wb", nil, core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ch, err := cl.Watch(ctx, "/wb", 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, _, err := core.Create(ctx, cl, fmt.Sprintf("/wb/w%02d-%02d", w, i), []byte("v"), core.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	responses := 0
	var last int64
	for len(seen) < writers*each {
		var r core.WatchResponse
		select {
		case r = <-ch:
		case <-ctx.Done():
			t.Fatalf("%d of %d events: %v", len(seen), writers*each, ctx.Err())
		}
		if r.Err != nil {
			t.Fatalf("watch ended: %v", r.Err)
		}
		responses++
		for _, e := range r.Events {
			if e.Revision <= last || seen[e.Path] {
				t.Fatalf("%s at revision %d after revision %d (seen before: %v)", e.Path, e.Revision, last, seen[e.Path])
			}
			last = e.Revision
			seen[e.Path] = true
		}
	}
	if responses >= writers*each {
		t.Fatalf("%d writes reached the watch in %d responses: not batched", writers*each, responses)
	}
	t.Logf("%d writes in %d watch responses", writers*each, responses)
}
