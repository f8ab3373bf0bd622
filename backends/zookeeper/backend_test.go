package zookeeper

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

func TestCreateGetSetDelete(t *testing.T) {
	b := open(t, testOptions(t))
	ctx := testutil.Context(t, 30*time.Second)
	p, st, err := core.Create(ctx, b, "/a/b", []byte("x"), core.CreateOptions{MakeParents: true})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if p != "/a/b" || st.Version != 0 || st.CreateRevision == 0 || st.DataLength != 1 {
		t.Fatalf("create: got %q %+v", p, st)
	}
	n, err := core.Get(ctx, b, "/a/b")
	if err != nil || string(n.Data) != "x" {
		t.Fatalf("get: %q %v", n.Data, err)
	}
	if _, _, err := core.Create(ctx, b, "/a/b", nil, core.CreateOptions{}); !errors.Is(err, core.ErrNodeExists) {
		t.Fatalf("second create: got %v, want ErrNodeExists", err)
	}
	if _, _, err := core.Create(ctx, b, "/x/y", nil, core.CreateOptions{}); !errors.Is(err, core.ErrNoParent) {
		t.Fatalf("create without parent: got %v, want ErrNoParent", err)
	}
	st2, err := core.Set(ctx, b, "/a/b", []byte("yy"), 0, core.Fence{})
	if err != nil || st2.Version != 1 || st2.ModifyRevision <= st.CreateRevision {
		t.Fatalf("set: %+v %v", st2, err)
	}
	if _, err := core.Set(ctx, b, "/a/b", []byte("z"), 0, core.Fence{}); !errors.Is(err, core.ErrBadVersion) {
		t.Fatalf("stale set: got %v, want ErrBadVersion", err)
	}
	if err := core.Delete(ctx, b, "/a", core.AnyVersion, core.Fence{}); !errors.Is(err, core.ErrNotEmpty) {
		t.Fatalf("delete parent: got %v, want ErrNotEmpty", err)
	}
	kids, _, err := b.Children(ctx, "/a", core.ReadOptions{})
	if err != nil || len(kids) != 1 || kids[0] != "b" {
		t.Fatalf("children: %v %v", kids, err)
	}
	if err := core.Delete(ctx, b, "/a/b", 1, core.Fence{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := core.Get(ctx, b, "/a/b"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("get deleted: got %v", err)
	}
	// Sequential and ephemeral modes.
	sp, _, err := core.Create(ctx, b, "/a/seq-", nil, core.CreateOptions{Mode: core.PersistentSequential})
	if err != nil || !strings.HasPrefix(sp, "/a/seq-") || len(sp) != len("/a/seq-")+10 {
		t.Fatalf("sequential: %q %v", sp, err)
	}
	_, est, err := core.Create(ctx, b, "/a/eph", nil, core.CreateOptions{Mode: core.Ephemeral})
	if err != nil || est.EphemeralOwner != b.Session().ID {
		t.Fatalf("ephemeral: %+v %v (session %x)", est, err, b.Session().ID)
	}
	if _, _, err := core.Create(ctx, b, "/a/eph/c", nil, core.CreateOptions{}); !errors.Is(err, core.ErrNoParent) {
		t.Fatalf("child of ephemeral: got %v, want ErrNoParent", err)
	}
}

func TestTxnFailingIndex(t *testing.T) {
	b := open(t, testOptions(t))
	ctx := testutil.Context(t, 30*time.Second)
	if _, _, err := core.Create(ctx, b, "/t", nil, core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := b.Txn(ctx, []core.Op{
		core.CreateOp("/t/1", nil, core.Persistent),
		core.CreateOp("/t/2/deep", nil, core.Persistent).WithParents(),
		core.SetOp("/t/missing", nil, core.AnyVersion),
	}, core.TxnOptions{})
	if core.FailedOpIndex(err) != 2 || !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("got %v (index %d), want index 2 ErrNotFound", err, core.FailedOpIndex(err))
	}
	if _, ok, _ := core.Exists(ctx, b, "/t/1"); ok {
		t.Fatal("refused txn left /t/1")
	}
	if _, ok, _ := core.Exists(ctx, b, "/t/2"); ok {
		t.Fatal("refused txn left an inserted parent")
	}
	res, err := b.Txn(ctx, []core.Op{
		core.CreateOp("/t/1", []byte("a"), core.Persistent),
		core.CreateOp("/t/2/deep", []byte("b"), core.Persistent).WithParents(),
		core.SetOp("/t/1", []byte("c"), 0),
		core.CheckOp("/t/2", core.AnyVersion),
	}, core.TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Results) != 4 || res.Results[1].Path != "/t/2/deep" || res.Results[2].Stat.Version != 1 {
		t.Fatalf("results: %+v", res.Results)
	}
	if res.Revision == 0 || res.Results[0].Stat.CreateRevision != res.Revision {
		t.Fatalf("revision %d, create revision %d", res.Revision, res.Results[0].Stat.CreateRevision)
	}
}

func TestTooLarge(t *testing.T) {
	b := open(t, testOptions(t))
	ctx := testutil.Context(t, 30*time.Second)
	big := bytes.Repeat([]byte("v"), MaxValueSize)
	if _, _, err := core.Create(ctx, b, "/big", big, core.CreateOptions{}); err != nil {
		t.Fatalf("create at the limit: %v", err)
	}
	if _, err := core.Set(ctx, b, "/big", append(big, 'x'), core.AnyVersion, core.Fence{}); !errors.Is(err, core.ErrTooLarge) {
		t.Fatalf("set over the limit: got %v, want ErrTooLarge", err)
	}
	n, err := core.Get(ctx, b, "/big")
	if err != nil || len(n.Data) != MaxValueSize {
		t.Fatalf("read back: %d bytes, %v", len(n.Data), err)
	}
	_, err = b.Txn(ctx, []core.Op{core.SetOp("/big", big, core.AnyVersion), core.SetOp("/big", big, core.AnyVersion)}, core.TxnOptions{})
	if !errors.Is(err, core.ErrTooLarge) || core.FailedOpIndex(err) != 1 {
		t.Fatalf("two large sets: got %v, want ErrTooLarge at 1", err)
	}
}

func TestSessionExpiry(t *testing.T) {
	b := open(t, testOptions(t))
	ctx := testutil.Context(t, 30*time.Second)
	other := open(t, testOptions(t))
	_ = other
	if _, _, err := core.Create(ctx, b, "/e", nil, core.CreateOptions{Mode: core.Ephemeral}); err != nil {
		t.Fatal(err)
	}
	old := b.Session().ID
	evs, err := b.SessionEvents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := b.ExpireSession(ctx); err != nil {
		t.Fatalf("expire: %v", err)
	}
	t.Logf("expired in %v", time.Since(start))
	if b.Session().ID == old || b.Session().State != core.SessionConnected {
		t.Fatalf("session after expiry: %+v (old %x)", b.Session(), old)
	}
	var got []core.SessionEvent
	for len(got) < 2 {
		select {
		case ev := <-evs:
			if ev.State == core.SessionSuspended {
				continue
			}
			got = append(got, ev)
		case <-time.After(5 * time.Second):
			t.Fatalf("events so far %v", got)
		}
	}
	if got[0].State != core.SessionExpired || got[0].SessionID != old || got[1].State != core.SessionConnected {
		t.Fatalf("events: %+v", got)
	}
	if _, ok, err := core.Exists(ctx, b, "/e"); ok || err != nil {
		t.Fatalf("ephemeral survived expiry: %v %v", ok, err)
	}
}

func TestStatus(t *testing.T) {
	o := testOptions(t)
	b := open(t, o)
	ctx := testutil.Context(t, 30*time.Second)
	l, err := b.Campaign(ctx, cand("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	st, err := b.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Backend != "zookeeper" || st.Role != core.RoleLeader || st.LeaderID != "a" || st.Epoch != 0 || st.Revision == 0 {
		t.Fatalf("status %+v", st)
	}
	if len(st.Members) != 1 || st.Members[0].Role != core.RoleStandalone || st.Members[0].Address != o.Address {
		t.Fatalf("members %+v", st.Members)
	}
}

// TestLargeTxn: a multi of thousands of small ops fits the request limit;
// one past it is refused with ErrTooLarge before anything is sent.
func TestLargeTxn(t *testing.T) {
	// The client gives up on a connection that reads nothing for two
	// thirds of the session timeout, and the server answers a session's
	// requests (its pings too) in order: a 5000-op multi on a loaded
	// machine can take longer than the 4s default of the tests gives it
	// (a stress flake: "connection closed"). The bound scales with the
	// work: a session timeout for a large multi.
	o := testOptions(t)
	o.SessionTimeout = 30 * time.Second
	b := open(t, o)
	ctx := testutil.Context(t, 30*time.Second)
	var ops []core.Op
	for i := 0; i < 5000; i++ {
		ops = append(ops, core.CreateOp(fmt.Sprintf("/big/t/%05d", i), []byte("v"), core.Persistent).WithParents())
	}
	res, err := b.Txn(ctx, ops, core.TxnOptions{})
	if err != nil || len(res.Results) != 5000 {
		t.Fatalf("5000-op txn: %v", err)
	}
	ops = ops[:0]
	for i := 0; i < 3; i++ {
		ops = append(ops, core.CreateOp(fmt.Sprintf("/big/v%d", i), bytes.Repeat([]byte("x"), 400<<10), core.Persistent))
	}
	_, err = b.Txn(ctx, ops, core.TxnOptions{})
	if !errors.Is(err, core.ErrTooLarge) || core.FailedOpIndex(err) != 2 {
		t.Fatalf("1.2 MB txn: %v", err)
	}
	if _, ok, _ := core.Exists(ctx, b, "/big/v0"); ok {
		t.Fatal("refused txn left a node")
	}
}
