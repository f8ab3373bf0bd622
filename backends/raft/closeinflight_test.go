package raft

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// outcome is what a write caught by a close reported.
type outcome int

const (
	applied    outcome = iota // nil: acknowledged
	notApplied                // ErrClosed: refused before it was proposed
	unknown                   // ErrUnavailable: in flight when the backend closed
)

// classify maps a write's error to what it tells about its outcome, and
// fails on anything else (a write caught by a close says one of these).
func classify(t *testing.T, p string, err error) outcome {
	t.Helper()
	switch {
	case err == nil:
		return applied
	case errors.Is(err, core.ErrClosed):
		return notApplied
	case errors.Is(err, core.ErrUnavailable) && strings.Contains(err.Error(), "outcome is unknown"):
		return unknown
	}
	t.Fatalf("write %s caught by a close: %v; want success, ErrClosed (not applied) or ErrUnavailable naming the unknown outcome", p, err)
	return unknown
}

// TestCloseCatchesWriteInFlight: a backend closed under a write in flight
// ends the write at once with a clear error, never a hang or a panic; the
// reopened store agrees with every definite report (an acknowledged write
// is there, one refused as closed is not), and a write whose outcome was
// reported unknown is either there or not, the same on every member.
func TestCloseCatchesWriteInFlight(t *testing.T) {
	t.Run("NoQuorum", func(t *testing.T) {
		// The followers are stopped: the write cannot commit and is in
		// flight for as long as the proposal timeout (a minute here) when
		// the leader closes.
		c := startCluster(t, 3, func(_ int, o *Options) { o.ProposalTimeout = time.Minute })
		l := c.waitLeader()
		cl := c.client(l)
		for i := range c.members {
			if i != l {
				c.stop(i)
			}
		}
		m := c.members[l].m
		done := make(chan error, 1)
		go func() {
			_, _, err := core.Create(context.Background(), cl, "/in-flight", []byte("x"), core.CreateOptions{})
			done <- err
		}()
		// In the leader's log, or (once the leader stepped down for want of
		// a quorum) waiting for a leader to take it.
		testutil.WaitFor(t, 20*time.Second, "the write being proposed", func() bool { return m.proposing.Load() > 0 })
		select {
		case err := <-done:
			t.Fatalf("the write returned before the close, without a quorum: %v", err)
		default:
		}
		closed := make(chan struct{})
		go func() { c.stop(l); close(closed) }()
		var err error
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the write caught by the close did not return within 30s (the proposal timeout is a minute)")
		}
		<-closed
		// It may be in the old leader's log: a later leader may commit it.
		if got := classify(t, "/in-flight", err); got != unknown {
			t.Fatalf("write in the log of a closed leader: %v, want outcome unknown", err)
		}
		reopenAndAgree(t, c, map[string]outcome{"/in-flight": unknown})
	})

	t.Run("UnderLoad", func(t *testing.T) {
		// Writers keep the leader busy; it closes after some acknowledged
		// writes, catching some in flight and refusing the next ones.
		c := startCluster(t, 3, nil)
		l := c.waitLeader()
		cl := c.client(l)
		var mu sync.Mutex
		results := map[string]outcome{}
		var acked int
		var wg sync.WaitGroup
		for w := 0; w < 6; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; ; i++ {
					p := fmt.Sprintf("/w%d-%03d", w, i)
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					_, _, err := core.Create(ctx, cl, p, []byte(p), core.CreateOptions{})
					cancel()
					mu.Lock()
					o := classify(t, p, err)
					results[p] = o
					if o == applied {
						acked++
					}
					mu.Unlock()
					if o != applied {
						return
					}
				}
			}(w)
		}
		testutil.WaitFor(t, 20*time.Second, "30 acknowledged writes", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return acked >= 30
		})
		c.stop(l)
		finished := make(chan struct{})
		go func() { wg.Wait(); close(finished) }()
		select {
		case <-finished:
		case <-time.After(30 * time.Second):
			t.Fatal("writers caught by the close did not all return within 30s")
		}
		counts := map[outcome]int{}
		for _, o := range results {
			counts[o]++
		}
		t.Logf("outcomes: %d acknowledged, %d refused as closed, %d unknown", counts[applied], counts[notApplied], counts[unknown])
		reopenAndAgree(t, c, results)
	})
}

// reopenAndAgree starts every stopped member of c again (the closed
// leader reopens its store from disk) and checks each path on every
// member: present if its write was acknowledged, absent if it was refused
// as closed, and for an unknown outcome the same answer on every member.
func reopenAndAgree(t *testing.T, c *cluster, results map[string]outcome) {
	t.Helper()
	for i := range c.members {
		if c.members[i] == nil {
			if err := c.start(i); err != nil {
				t.Fatalf("reopen member %d: %v", i+1, err)
			}
		}
	}
	c.waitLeader()
	paths := make([]string, 0, len(results))
	for p := range results {
		paths = append(paths, p)
	}
	ctx := testutil.Context(t, 20*time.Second)
	var first []core.GetResult
	for i := range c.members {
		cl := c.client(i)
		var res []core.GetResult
		testutil.WaitFor(t, 20*time.Second, fmt.Sprintf("a linearizable read on reopened member %d", i+1), func() bool {
			var err error
			res, err = cl.GetMany(ctx, paths, core.ReadOptions{})
			return err == nil
		})
		for j, p := range paths {
			exists := res[j].Err == nil
			if res[j].Err != nil && !errors.Is(res[j].Err, core.ErrNotFound) {
				t.Fatalf("member %d: read %s: %v", i+1, p, res[j].Err)
			}
			switch results[p] {
			case applied:
				if !exists || string(res[j].Node.Data) != p {
					t.Fatalf("member %d: acknowledged write %s lost after the reopen: %+v", i+1, p, res[j])
				}
			case notApplied:
				if exists {
					t.Fatalf("member %d: write %s reported not applied (closed) exists after the reopen", i+1, p)
				}
			}
			if first != nil && exists != (first[j].Err == nil) {
				t.Fatalf("members disagree on %s after the reopen: member 1 %v, member %d %v", p, first[j].Err, i+1, res[j].Err)
			}
		}
		if first == nil {
			first = res
		}
	}
}
