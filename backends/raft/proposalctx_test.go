package raft

import (
	"context"
	"testing"
	"time"
)

// TestProposalCtx: a proposal is bounded by the proposal timeout, or by
// its caller's deadline when that comes first, in which case the caller's
// context itself is used (no second timer).
func TestProposalCtx(t *testing.T) {
	const timeout = 10 * time.Second

	none, cancel := proposalCtx(context.Background(), timeout)
	defer cancel()
	d, ok := none.Deadline()
	if !ok || time.Until(d) > timeout || time.Until(d) < timeout-time.Second {
		t.Fatalf("no caller deadline: proposal deadline %v (set %v), want about %v from now", time.Until(d), ok, timeout)
	}

	sooner, cancelSooner := context.WithTimeout(context.Background(), time.Second)
	defer cancelSooner()
	got, cancel2 := proposalCtx(sooner, timeout)
	defer cancel2()
	if got != sooner {
		t.Fatal("a caller deadline before the timeout: want the caller's context itself")
	}
	cancel2() // must not end the caller's context
	if sooner.Err() != nil {
		t.Fatalf("the proposal's cancel ended the caller's context: %v", sooner.Err())
	}

	later, cancelLater := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLater()
	bounded, cancel3 := proposalCtx(later, timeout)
	defer cancel3()
	if d, _ := bounded.Deadline(); time.Until(d) > timeout {
		t.Fatalf("a caller deadline after the timeout: proposal deadline %v from now, want at most %v", time.Until(d), timeout)
	}
	cancelLater()
	if bounded.Err() == nil {
		t.Fatal("the caller's cancellation did not reach the bounded proposal context")
	}
}
