package adminclient

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// gossipFake is a fakeAdmin whose GetLeader lists the coordinators set in
// it.
type gossipFake struct {
	fakeAdmin
	coordinators []string
}

func (g *gossipFake) set(addrs ...string) {
	g.mu.Lock()
	g.coordinators = addrs
	g.mu.Unlock()
}

func (g *gossipFake) GetLeader(context.Context, *adminv1.GetLeaderRequest) (*adminv1.GetLeaderResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := &adminv1.GetLeaderResponse{}
	for _, a := range g.coordinators {
		r.Coordinators = append(r.Coordinators, &adminv1.CoordinatorInfo{Address: a})
	}
	return r, nil
}

func serveGossipFake(t *testing.T, g *gossipFake) (string, func()) {
	t.Helper()
	g.reads = []error{nil}
	return serveFake(t, g)
}

// TestRefreshLearnsAndForgetsCoordinators: a client bootstrapped with one
// coordinator learns the others from its GetLeader answer, drops an
// address the answer no longer lists (but never a bootstrap address), and
// keeps calling through a learned coordinator when its only bootstrap
// coordinator is gone.
func TestRefreshLearnsAndForgetsCoordinators(t *testing.T) {
	a, b := &gossipFake{}, &gossipFake{}
	addrA, stopA := serveGossipFake(t, a)
	addrB, _ := serveGossipFake(t, b)
	dead := deadAddr(t)
	a.set(addrA, addrB, dead)
	b.set(addrA, addrB)
	c := testClient(t, addrA)
	ctx := ctxFor(t, 10*time.Second)

	if got := c.Coordinators(); !slices.Equal(got, []string{addrA}) {
		t.Fatalf("before Refresh: %v, want the bootstrap address only", got)
	}
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := c.Coordinators(), []string{addrA, addrB, dead}; !slices.Equal(got, want) {
		t.Fatalf("after Refresh: %v, want %v", got, want)
	}
	a.set(addrA, addrB)
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := c.Coordinators(), []string{addrA, addrB}; !slices.Equal(got, want) {
		t.Fatalf("after the dead one left the answer: %v, want %v", got, want)
	}

	stopA()
	before := b.nRead.Load()
	if err := list(ctx, c); err != nil {
		t.Fatalf("read with the bootstrap coordinator gone: %v", err)
	}
	if b.nRead.Load() != before+1 {
		t.Fatalf("the read did not reach the learned coordinator %s", addrB)
	}
	b.set(addrB)
	if err := c.Refresh(ctx); err != nil {
		t.Fatalf("Refresh with the bootstrap coordinator gone: %v", err)
	}
	if got, want := c.Coordinators(), []string{addrA, addrB}; !slices.Equal(got, want) {
		t.Fatalf("the bootstrap address was dropped: %v, want %v", got, want)
	}
}

// TestRefreshIntervalRefreshesInTheBackground: with RefreshInterval the
// client learns without a call, and Close stops it.
func TestRefreshIntervalRefreshesInTheBackground(t *testing.T) {
	a := &gossipFake{}
	addrA, _ := serveGossipFake(t, a)
	other := deadAddr(t)
	a.set(addrA, other)
	c, err := NewClientWithOptions([]string{addrA}, Options{RefreshInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testutil.WaitFor(t, 10*time.Second, "a background refresh", func() bool { return slices.Contains(c.Coordinators(), other) })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
