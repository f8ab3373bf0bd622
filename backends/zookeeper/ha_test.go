package zookeeper

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/internal/zktest"
)

// haTimeout is the session timeout of the HA tests' clients.
const haTimeout = 2 * time.Second

// treeUnder returns the names of path's children, sorted, and each
// child's data.
func treeUnder(t *testing.T, b *Backend, path string) map[string]string {
	t.Helper()
	snap, err := b.Snapshot(testutil.Context(t, 30*time.Second), path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range snap.Nodes {
		if n.Path != path {
			out[strings.TrimPrefix(n.Path, path+"/")] = string(n.Data)
		}
	}
	return out
}

// TestOldLeaderReconnection (FIP-9): the leader's connection is cut,
// through a proxy, past its session timeout; a new leader is elected; when
// the old leader comes back every write it tries with its old fence is
// refused with ErrFenced, and the tree holds only what the leaders wrote
// while they led.
func TestOldLeaderReconnection(t *testing.T) {
	o := testOptions(t)
	proxy := zktest.StartProxy(t, o.Address)
	viaProxy := o
	viaProxy.Address = proxy.Addr()
	viaProxy.SessionTimeout = haTimeout
	oldC := open(t, viaProxy)
	newC := open(t, o)
	ctx := testutil.Context(t, 30*time.Second)

	lOld, err := oldC.Campaign(ctx, cand("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := core.Create(ctx, oldC, "/data/a1", []byte("old leader"), core.CreateOptions{MakeParents: true, Fence: lOld.Fence()}); err != nil {
		t.Fatalf("write while leading: %v", err)
	}
	chNew := campaignAsync(ctx, newC, cand("b"))

	cut := time.Now()
	proxy.SetMode(zktest.Blackhole)
	// A write sent into the partition never lands.
	wctx, wcancel := context.WithTimeout(ctx, haTimeout)
	_, _, werr := core.Create(wctx, oldC, "/data/a-partitioned", nil, core.CreateOptions{Fence: lOld.Fence()})
	wcancel()
	if werr == nil {
		t.Fatal("a write through a partition succeeded")
	}
	lNew := waitElected(t, chNew, haTimeout+5*time.Second)
	t.Logf("new leader after %v (session timeout %v)", time.Since(cut), haTimeout)
	if lNew.Epoch() != lOld.Epoch()+1 {
		t.Fatalf("new epoch %d, old %d", lNew.Epoch(), lOld.Epoch())
	}
	waitLost(t, lOld, haTimeout+2*time.Second, "the cut")
	if _, _, err := core.Create(ctx, newC, "/data/b1", []byte("new leader"), core.CreateOptions{Fence: lNew.Fence()}); err != nil {
		t.Fatalf("new leader's write: %v", err)
	}

	proxy.Restore()
	if err := oldC.waitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	f := lOld.Fence()
	attempts := []struct {
		name string
		do   func() error
	}{
		{"create", func() error {
			_, _, err := core.Create(ctx, oldC, "/data/a2", []byte("stale"), core.CreateOptions{Fence: f})
			return err
		}},
		{"set", func() error {
			_, err := core.Set(ctx, oldC, "/data/a1", []byte("stale"), core.AnyVersion, f)
			return err
		}},
		{"set new leader's node", func() error {
			_, err := core.Set(ctx, oldC, "/data/b1", []byte("stale"), core.AnyVersion, f)
			return err
		}},
		{"delete", func() error { return core.Delete(ctx, oldC, "/data/a1", core.AnyVersion, f) }},
		{"multi", func() error {
			_, err := oldC.Txn(ctx, []core.Op{core.CreateOp("/data/a3", nil, core.Persistent), core.DeleteOp("/data/b1", core.AnyVersion)}, core.TxnOptions{Fence: f})
			return err
		}},
		{"allocate ids", func() error { _, err := core.AllocateIDs(ctx, oldC, "/data/seq", 1, f); return err }},
	}
	for _, a := range attempts {
		if err := a.do(); !errors.Is(err, core.ErrFenced) {
			t.Errorf("old leader's %s after reconnecting: got %v, want ErrFenced", a.name, err)
		}
	}
	got := treeUnder(t, newC, "/data")
	want := map[string]string{"a1": "old leader", "b1": "new leader"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("tree under /data: got %v, want %v", got, want)
	}
	li, err := oldC.Leader(ctx)
	if err != nil || li.ID != "b" {
		t.Fatalf("the old leader sees leader %+v, %v; want b", li, err)
	}
}

// TestDualLeaderWrites (FIP-9): two coordinators that both believe they
// lead write at once; only the current epoch's writes land.
func TestDualLeaderWrites(t *testing.T) {
	o := testOptions(t)
	o.SessionTimeout = haTimeout
	a, b := open(t, o), open(t, o)
	ctx := testutil.Context(t, 30*time.Second)
	la, err := a.Campaign(ctx, cand("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := core.Create(ctx, a, "/dual/counter", core.EncodeCounter(0), core.CreateOptions{MakeParents: true, Fence: la.Fence()}); err != nil {
		t.Fatal(err)
	}
	chB := campaignAsync(ctx, b, cand("b"))
	// a's session ends behind its back; a keeps its fence (as a
	// coordinator that has not noticed yet would).
	staleFence := la.Fence()
	if err := a.ExpireSession(ctx); err != nil {
		t.Fatal(err)
	}
	lb := waitElected(t, chB, 10*time.Second)

	const n = 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	errsA, okB := 0, 0
	var unexpected []error
	for i := 0; i < n; i++ {
		wg.Add(2)
		go func(i int) {
			defer wg.Done()
			_, _, err := core.Create(ctx, a, fmt.Sprintf("/dual/a-%02d", i), nil, core.CreateOptions{Fence: staleFence})
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(err, core.ErrFenced) {
				errsA++
			} else {
				unexpected = append(unexpected, fmt.Errorf("a-%02d: %v", i, err))
			}
		}(i)
		go func(i int) {
			defer wg.Done()
			_, err := b.Txn(ctx, []core.Op{
				core.CreateOp(fmt.Sprintf("/dual/b-%02d", i), nil, core.Persistent),
			}, core.TxnOptions{Fence: lb.Fence()})
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				okB++
			} else {
				unexpected = append(unexpected, fmt.Errorf("b-%02d: %v", i, err))
			}
		}(i)
	}
	// Both also race on one counter.
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; i < 5; i++ {
			if _, err := core.AllocateIDs(ctx, a, "/dual/counter", 100, staleFence); !errors.Is(err, core.ErrFenced) {
				mu.Lock()
				unexpected = append(unexpected, fmt.Errorf("stale allocation: %v", err))
				mu.Unlock()
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 5; i++ {
			if _, err := core.AllocateIDs(ctx, b, "/dual/counter", 1, lb.Fence()); err != nil {
				mu.Lock()
				unexpected = append(unexpected, fmt.Errorf("allocation: %v", err))
				mu.Unlock()
			}
		}
	}()
	wg.Wait()
	if len(unexpected) > 0 {
		t.Fatalf("unexpected outcomes: %v", unexpected)
	}
	if errsA != n || okB != n {
		t.Fatalf("stale leader refused %d/%d, current leader landed %d/%d", errsA, n, okB, n)
	}
	got := treeUnder(t, b, "/dual")
	var names []string
	for k := range got {
		names = append(names, k)
	}
	sort.Strings(names)
	if len(names) != n+1 || names[0] != "b-00" || names[n] != "counter" {
		t.Fatalf("tree under /dual: %v", names)
	}
	if v, _ := core.DecodeCounter([]byte(got["counter"])); v != 5 {
		t.Fatalf("counter %d, want 5 (only the current leader's allocations)", v)
	}
}

const helperEnv = "METAPLANE_ZK_TEST_HELPER"

// runHelper is the child-process side of TestLeaderProcessKilled: it
// campaigns, prints "LEADER <epoch>" and waits to be killed (at most a
// minute).
func runHelper() {
	o := Options{
		Address:        os.Getenv("METAPLANE_ZK_TEST_ADDR"),
		Root:           os.Getenv("METAPLANE_ZK_TEST_ROOT"),
		SessionTimeout: haTimeout,
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := Open(ctx, o, core.ClientOptions{Name: "helper"})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	l, err := b.Campaign(ctx, core.Candidate{ID: "child", Address: "CLIENT://127.0.0.1:9009"})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Println("LEADER", l.Epoch())
	<-ctx.Done()
	os.Exit(0)
}

// TestLeaderProcessKilled (FIP-9): the leader runs in a child process (this
// test binary re-executed); SIGKILL leaves its session to expire, and a
// standby is elected within the session timeout (plus the server's expiry
// tick and one election round).
func TestLeaderProcessKilled(t *testing.T) {
	o := testOptions(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=leader", "METAPLANE_ZK_TEST_ADDR="+o.Address, "METAPLANE_ZK_TEST_ROOT="+o.Root)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "LEADER") || strings.HasPrefix(sc.Text(), "ERROR") {
				line <- sc.Text()
				return
			}
		}
		line <- "EOF"
	}()
	var first string
	select {
	case first = <-line:
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not become leader")
	}
	if !strings.HasPrefix(first, "LEADER ") {
		t.Fatalf("child: %s", first)
	}
	childEpoch, _ := strconv.ParseInt(strings.TrimPrefix(first, "LEADER "), 10, 64)

	standby := open(t, o)
	ctx := testutil.Context(t, 30*time.Second)
	li, err := standby.Leader(ctx)
	if err != nil || li.ID != "child" {
		t.Fatalf("leader before the kill: %+v %v", li, err)
	}
	ch := campaignAsync(ctx, standby, cand("b"))
	testWaitChildren(t, standby, electionPath, 2)
	killed := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	l := waitElected(t, ch, 3*haTimeout)
	took := time.Since(killed)
	t.Logf("new leader %v after SIGKILL (session timeout %v)", took, haTimeout)
	// The documented bound (docs/zookeeper.md): the session timeout plus
	// one server tick (the server expires sessions on tick boundaries)
	// plus 1 s.
	if bound := haTimeout + zktest.DefaultTickTime + time.Second; took > bound {
		t.Fatalf("new leader after %v; want within %v: the session timeout %v + one tick %v + 1s", took, bound, haTimeout, zktest.DefaultTickTime)
	}
	if l.Epoch() != childEpoch+1 {
		t.Fatalf("epoch %d after the child's %d", l.Epoch(), childEpoch)
	}
}

// TestEnsembleLoss: with 1 of 3 servers killed calls go on (the client
// moves to another server within its session, after retries); with 2 of 3
// killed writes fail with ErrUnavailable and leave nothing behind.
func TestEnsembleLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-server ensemble; skipped with -short")
	}
	ens := zktest.StartEnsemble(t, 3)
	o := Options{
		Address:           ens.ConnectString(),
		Root:              "/ensemble",
		SessionTimeout:    6 * time.Second,
		ConnectionTimeout: 20 * time.Second,
		RetryWait:         200 * time.Millisecond,
		MaxRetryAttempts:  5,
	}
	c := open(t, o)
	ctx, cancelAll := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelAll()
	l, err := c.Campaign(ctx, cand("a"))
	if err != nil {
		t.Fatal(err)
	}
	sid := c.Session().ID
	idx := func(addr string) int {
		for i, a := range ens.Addrs() {
			if a == addr {
				return i
			}
		}
		t.Fatalf("connected to %s, not an ensemble member", addr)
		return -1
	}
	first := idx(c.conn.Server())
	phase := time.Now()
	ens.Kill(first)

	// Reads retry by themselves; writes are retried by the caller (their
	// outcome is unknown after a lost connection), idempotently.
	for i := 0; i < 10; i++ {
		p := fmt.Sprintf("/e/n-%d", i)
		deadline := time.Now().Add(20 * time.Second)
		for {
			_, _, err := core.Create(ctx, c, p, []byte("x"), core.CreateOptions{MakeParents: true, Fence: l.Fence()})
			if err == nil || errors.Is(err, core.ErrNodeExists) {
				break
			}
			if !errors.Is(err, core.ErrUnavailable) || time.Now().After(deadline) {
				t.Fatalf("write %s with 1 of 3 servers down: %v", p, err)
			}
			time.Sleep(50 * time.Millisecond) // back off while the client moves to a live server
		}
	}
	kids, _, err := c.Children(ctx, "/e", core.ReadOptions{})
	if err != nil || len(kids) != 10 {
		t.Fatalf("children with 1 of 3 down: %v %v", kids, err)
	}
	if c.Session().ID != sid {
		t.Fatalf("the session changed (%x -> %x): it should survive moving servers", sid, c.Session().ID)
	}
	notLost(t, l, "one server of three died")
	t.Logf("1 of 3 down: writes and reads done in %v", time.Since(phase))
	phase = time.Now()

	// Lose the quorum.
	var second int
	for i := range ens.Addrs() {
		if i != first {
			second = i
			break
		}
	}
	ens.Kill(second)
	var last int
	for i := range ens.Addrs() {
		if i != first && i != second {
			last = i
		}
	}
	testWaitFor(t, "the last server to stop serving", func() bool { return ens.Mode(last) == "" })
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	_, err = c.Txn(wctx, []core.Op{
		core.CreateOp("/e/lost-1", nil, core.Persistent),
		core.CreateOp("/e/lost-2", nil, core.Persistent),
		core.SetOp("/e/n-0", []byte("changed"), core.AnyVersion),
	}, core.TxnOptions{Fence: l.Fence()})
	cancel()
	if !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("write without a quorum: got %v, want ErrUnavailable", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	_, err = core.Get(rctx, c, "/e/n-0")
	cancel()
	if !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("read without a quorum: got %v, want ErrUnavailable", err)
	}

	t.Logf("2 of 3 down: refused write and read in %v", time.Since(phase))
	phase = time.Now()
	// Bring the quorum back: nothing of the refused write is there.
	if err := ens.Restart(first); err != nil {
		t.Fatal(err)
	}
	if err := ens.Restart(second); err != nil {
		t.Fatal(err)
	}
	check := open(t, o)
	res, err := check.GetMany(ctx, []string{"/e/lost-1", "/e/lost-2", "/e/n-0"}, core.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[0].Err, core.ErrNotFound) || !errors.Is(res[1].Err, core.ErrNotFound) || string(res[2].Node.Data) != "x" {
		t.Fatalf("after the quorum came back: %+v", res)
	}
	t.Logf("quorum back and checked in %v", time.Since(phase))
}

// TestTabletServerExpiry: a tablet server registers; its session expires;
// the coordinator's watch sees the registration go, and come back once the
// tablet server re-registers in its new session. A restarted tablet
// server waits out its previous session's node.
func TestTabletServerExpiry(t *testing.T) {
	o := testOptions(t)
	o.SessionTimeout = haTimeout
	coord, ts := open(t, o), open(t, o)
	ctx := testutil.Context(t, 30*time.Second)
	w, err := coord.Watch(ctx, "/tabletservers/ids", 0)
	if err != nil {
		t.Fatal(err)
	}
	reg := []byte(`{"version":4,"listeners":"CLIENT://localhost:2345,FLUSS://127.0.0.1:2346","register_timestamp":10000,"rack":"cn-hangzhou-server10","cpu_cores":8.0,"memory_bytes":1024}`)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- KeepTabletServerRegistered(rctx, ts, 7, reg, nil) }()
	defer func() { stop(); <-done }()

	path := TabletServerPath(7)
	next := func(what string, match func(core.WatchEvent) bool) core.WatchEvent {
		t.Helper()
		timeout := time.After(15 * time.Second)
		for {
			select {
			case r, ok := <-w:
				if !ok {
					t.Fatalf("watch closed waiting for %s", what)
				}
				for _, ev := range r.Events {
					if match(ev) {
						return ev
					}
				}
			case <-timeout:
				t.Fatalf("no event: %s", what)
			}
		}
	}
	ev := next("registration", func(ev core.WatchEvent) bool { return ev.Type == core.EventCreated && ev.Path == path })
	if string(ev.Data) != string(reg) || ev.Stat.EphemeralOwner != ts.Session().ID {
		t.Fatalf("registration event: %s owner %x", ev.Data, ev.Stat.EphemeralOwner)
	}
	old := ts.Session().ID
	if err := ts.ExpireSession(ctx); err != nil {
		t.Fatal(err)
	}
	next("deregistration after expiry", func(ev core.WatchEvent) bool { return ev.Type == core.EventDeleted && ev.Path == path })
	ev = next("re-registration", func(ev core.WatchEvent) bool { return ev.Type == core.EventCreated && ev.Path == path })
	if ev.Stat.EphemeralOwner == old || ev.Stat.EphemeralOwner != ts.Session().ID {
		t.Fatalf("re-registered by session %x (old %x, now %x)", ev.Stat.EphemeralOwner, old, ts.Session().ID)
	}

	// A restarted tablet server (a new client) waits for the node its
	// previous session left.
	prev := open(t, o)
	if err := RegisterTabletServer(ctx, prev, 8, reg); err != nil {
		t.Fatal(err)
	}
	restarted := open(t, o)
	regDone := make(chan error, 1)
	go func() { regDone <- RegisterTabletServer(ctx, restarted, 8, reg) }()
	select {
	case err := <-regDone:
		t.Fatalf("registered over another session's live node: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	prev.Close()
	select {
	case err := <-regDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("registration still waiting after the old session ended")
	}
	st, ok, err := core.Exists(ctx, coord, TabletServerPath(8))
	if err != nil || !ok || st.EphemeralOwner != restarted.Session().ID {
		t.Fatalf("node 8: %+v %v %v; want owned by the restarted server %x", st, ok, err, restarted.Session().ID)
	}
}
