package zookeeper

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// TestCloseLeavesNoGoroutines: a client used for everything (watches,
// session events, leadership, observation) leaves no goroutine behind
// once closed.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	o := testOptions(t)
	ctx := testutil.Context(t, 30*time.Second)
	before := goleak.IgnoreCurrent()
	b, err := Open(ctx, o, core.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Watch(ctx, "/", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.SessionEvents(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Campaign(ctx, cand("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ObserveLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := core.Create(ctx, b, "/x/y", nil, core.CreateOptions{MakeParents: true}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	goleak.VerifyNone(t, before)
}
