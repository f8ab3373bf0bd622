package raft

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// TestSubscribersNeedNoGoroutine: session-event subscribers and leader
// observers cost no goroutine each; every observer gets the new leader and
// a session event, and every channel closes when its context ends.
func TestSubscribersNeedNoGoroutine(t *testing.T) {
	const n = 200
	c := startCluster(t, 1, nil)
	ctx := testutil.Context(t, 20*time.Second)
	cl := c.client(0)
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	before := runtime.NumGoroutine()
	leaders := make([]<-chan core.LeaderInfo, n)
	events := make([]<-chan core.SessionEvent, n)
	for i := range n {
		var err error
		if leaders[i], err = cl.ObserveLeader(octx); err != nil {
			t.Fatalf("observe: %v", err)
		}
		if events[i], err = cl.SessionEvents(octx); err != nil {
			t.Fatalf("session events: %v", err)
		}
	}
	// The member's own goroutines come and go; a goroutine per
	// subscriber would add 2n.
	if after := runtime.NumGoroutine(); after > before+n/4 {
		t.Fatalf("goroutines: %d before %d subscriptions, %d after; want none per subscriber", before, 2*n, after)
	}
	l, err := cl.Campaign(ctx, core.Candidate{ID: "a", Address: "CLIENT://a:1"})
	if err != nil {
		t.Fatalf("campaign: %v", err)
	}
	old := cl.Session().ID
	if err := cl.ExpireSession(ctx); err != nil {
		t.Fatalf("expire: %v", err)
	}
	for i := range n {
		got := nextLeader(t, leaders[i], "observer", func(li core.LeaderInfo) bool { return li.ID == "a" })
		if got.Epoch != l.Epoch() {
			t.Fatalf("observer %d: %+v, want epoch %d", i, got, l.Epoch())
		}
		timer := time.NewTimer(observeWait)
		select {
		case ev := <-events[i]:
			if ev.State != core.SessionExpired || ev.SessionID != old {
				t.Fatalf("subscriber %d: first event %+v, want SessionExpired of %#x", i, ev, old)
			}
		case <-timer.C:
			t.Fatalf("subscriber %d: no session event within %v", i, observeWait)
		}
		timer.Stop()
	}
	cancel()
	deadline := time.After(observeWait)
	for i := range n {
		waitClosed(t, leaders[i], deadline)
		waitClosed(t, events[i], deadline)
	}
}

// waitClosed reads ch until it is closed, failing at deadline.
func waitClosed[T any](t *testing.T, ch <-chan T, deadline <-chan time.Time) {
	t.Helper()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("a subscriber's channel still open %v after its context ended", observeWait)
		}
	}
}
