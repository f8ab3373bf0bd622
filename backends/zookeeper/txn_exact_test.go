package zookeeper

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// TestDeleteRevisionIsExact: a transaction of deletes and checks answers
// its own zxid, not a later one this client saw. One goroutine deletes a
// child of a parent nobody else touches, so the parent's pzxid is exactly
// the delete's zxid; two others write through the same client meanwhile,
// whose replies (later zxids) arrive while the delete's answer is in
// flight.
func TestDeleteRevisionIsExact(t *testing.T) {
	b := open(t, testOptions(t))
	ctx := testutil.Context(t, 60*time.Second)
	for _, p := range []string{"/mine", "/noise"} {
		if _, _, err := core.Create(ctx, b, p, nil, core.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := fmt.Sprintf("/noise/g%d-%d", g, i)
				if _, _, err := core.Create(ctx, b, p, nil, core.CreateOptions{}); err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	defer func() { close(stop); wg.Wait() }()
	for i := 0; i < 60; i++ {
		if _, _, err := core.Create(ctx, b, "/mine/x", []byte("v"), core.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		res, err := b.Txn(ctx, []core.Op{
			core.CheckOp("/mine", core.AnyVersion),
			core.DeleteOp("/mine/x", 0),
		}, core.TxnOptions{})
		if err != nil {
			t.Fatalf("round %d: delete: %v", i, err)
		}
		n, err := core.Get(ctx, b, "/mine")
		if err != nil {
			t.Fatal(err)
		}
		if res.Revision != n.Stat.ChildrenRevision {
			t.Fatalf("round %d: the delete answered revision %d; it ran at zxid %d (the parent's pzxid)", i, res.Revision, n.Stat.ChildrenRevision)
		}
	}
}

// TestDeleteTxnErrors: the backend's own multi maps refusals like the
// library's: the caller's op index, the sentinel, nothing applied.
func TestDeleteTxnErrors(t *testing.T) {
	b := open(t, testOptions(t))
	ctx := testutil.Context(t, 30*time.Second)
	for _, p := range []string{"/a", "/a/b", "/c"} {
		if _, _, err := core.Create(ctx, b, p, nil, core.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		ops   []core.Op
		index int
		want  error
	}{
		{[]core.Op{core.DeleteOp("/c", core.AnyVersion), core.DeleteOp("/missing", core.AnyVersion)}, 1, core.ErrNotFound},
		{[]core.Op{core.DeleteOp("/c", core.AnyVersion), core.DeleteOp("/a", core.AnyVersion)}, 1, core.ErrNotEmpty},
		{[]core.Op{core.DeleteOp("/c", 7)}, 0, core.ErrBadVersion},
		{[]core.Op{core.CheckOp("/a/b", 3), core.DeleteOp("/c", core.AnyVersion)}, 0, core.ErrBadVersion},
	}
	for i, c := range cases {
		_, err := b.Txn(ctx, c.ops, core.TxnOptions{})
		var te *core.TxnError
		if !errors.As(err, &te) || te.Index != c.index || !errors.Is(err, c.want) {
			t.Errorf("case %d: got %v, want op %d: %v", i, err, c.index, c.want)
		}
		if _, err := core.Get(ctx, b, "/c"); err != nil {
			t.Fatalf("case %d: a refused transaction deleted /c: %v", i, err)
		}
	}
	// A fenced delete with a stale token changes nothing either.
	_, err := b.Txn(ctx, []core.Op{core.DeleteOp("/c", core.AnyVersion)},
		core.TxnOptions{Fence: core.Fence{Valid: true, Epoch: 1, Token: 5}})
	if !errors.Is(err, core.ErrFenced) {
		t.Fatalf("fenced delete: got %v, want ErrFenced", err)
	}
	if _, err := core.Get(ctx, b, "/c"); err != nil {
		t.Fatalf("a fenced delete deleted /c: %v", err)
	}
}
