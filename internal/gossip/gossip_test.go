package gossip_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/metaplane/metaplane/internal/gossip"
	"github.com/metaplane/metaplane/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// memberlist's Shutdown does not wait for a probe in flight (it
		// ends at its probe timeout): not a leak of ours.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
			goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode.func1")); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

func start(t *testing.T, name string, key []byte, meta string, seeds ...string) *gossip.Node {
	t.Helper()
	n, err := gossip.Start(gossip.Options{Name: name, BindAddr: "127.0.0.1", Key: key, Meta: []byte(meta), Fast: true,
		RejoinInterval: 100 * time.Millisecond, Logger: testutil.Logger(t),
		Seeds: func(context.Context) []string { return seeds }})
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() { n.Close(time.Second) })
	return n
}

// metas returns name=meta of every member n sees.
func metas(n *gossip.Node) string {
	var parts []string
	for _, m := range n.Members() {
		parts = append(parts, m.Name+"="+string(m.Meta))
	}
	return strings.Join(parts, ",")
}

func TestMembersAndMeta(t *testing.T) {
	key := []byte("0123456789abcdef")
	a := start(t, "a", key, "A0")
	// b and c know only a.
	b := start(t, "b", key, "B0", a.Address())
	c := start(t, "c", key, "C0", a.Address())
	want := "a=A0,b=B0,c=C0"
	for _, n := range []*gossip.Node{a, b, c} {
		testutil.WaitFor(t, 10*time.Second, "every member seen by "+n.Address(), func() bool { return metas(n) == want })
	}
	if err := a.SetMeta([]byte("A1")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "a's new metadata reaches c", func() bool { return metas(c) == "a=A1,b=B0,c=C0" })

	// A node with another key (or none) does not get in.
	for _, k := range [][]byte{[]byte("fedcba9876543210"), nil} {
		stranger := start(t, fmt.Sprintf("stranger-%d", len(k)), k, "X", a.Address())
		// Give its join attempts time to fail for sure: wait until it has
		// tried (its member list still lists itself only) while the others
		// stay three.
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			if len(stranger.Members()) != 1 || len(a.Members()) != 3 {
				t.Fatalf("a member with key %q got in: stranger sees %s, a sees %s", k, metas(stranger), metas(a))
			}
			time.Sleep(50 * time.Millisecond) // polling for the absence of a join
		}
	}

	// c dies without leaving: the others drop it.
	if err := c.Close(0); err != nil {
		t.Logf("close c: %v", err)
	}
	testutil.WaitFor(t, 10*time.Second, "c gone from a and b", func() bool {
		return metas(a) == "a=A1,b=B0" && metas(b) == "a=A1,b=B0"
	})

	if err := a.SetMeta(make([]byte, gossip.MaxMetaSize+1)); !errors.Is(err, gossip.ErrMetaTooLarge) {
		t.Fatalf("SetMeta of %d bytes: %v, want ErrMetaTooLarge", gossip.MaxMetaSize+1, err)
	}
}

// TestBindsTCPAndUDP: the one port is bound for both, and released on
// Close.
func TestBindsTCPAndUDP(t *testing.T) {
	port := testutil.FreePort(t)
	n, err := gossip.Start(gossip.Options{Name: "a", BindAddr: "127.0.0.1", Port: port, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if n.Address() != addr {
		t.Errorf("Address() = %s, want %s", n.Address(), addr)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Errorf("TCP %s is not bound by the gossip node", addr)
	}
	if pc, err := net.ListenPacket("udp", addr); err == nil {
		pc.Close()
		t.Errorf("UDP %s is not bound by the gossip node", addr)
	}
	if err := n.Close(time.Second); err != nil {
		t.Logf("close: %v", err)
	}
	testutil.WaitFor(t, 5*time.Second, "the port released", func() bool { return testutil.PortFree(port) })
	if _, err := gossip.Start(gossip.Options{Name: "k", BindAddr: "127.0.0.1", Key: []byte("short")}); err == nil {
		t.Fatal("a 5-byte key was accepted")
	}
}

// TestPartitionedGroupsMerge: two groups of two members that never saw
// each other (as after a partition: neither member is alone, so neither
// rejoins for being alone) merge once a seed of the other group is
// reachable: every member heals by joining the seeds it does not see.
func TestPartitionedGroupsMerge(t *testing.T) {
	var mu sync.Mutex
	var all []string
	startWith := func(name string, first ...string) *gossip.Node {
		n, err := gossip.Start(gossip.Options{Name: name, BindAddr: "127.0.0.1", Fast: true,
			RejoinInterval: 50 * time.Millisecond, HealInterval: 200 * time.Millisecond, Logger: testutil.Logger(t),
			Seeds: func(context.Context) []string {
				mu.Lock()
				defer mu.Unlock()
				if all != nil {
					return all
				}
				return first
			}})
		if err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		t.Cleanup(func() { n.Close(time.Second) })
		return n
	}
	a := startWith("a")
	b := startWith("b", a.Address())
	c := startWith("c")
	d := startWith("d", c.Address())
	testutil.WaitFor(t, 10*time.Second, "two groups of two", func() bool {
		return metas(a) == "a=,b=" && metas(b) == "a=,b=" && metas(c) == "c=,d=" && metas(d) == "c=,d="
	})
	// The groups stay apart while the seeds name only their own group.
	for _, n := range []*gossip.Node{a, b, c, d} {
		if len(n.Members()) != 2 {
			t.Fatalf("%s sees %s before the seeds name the other group", n.Address(), metas(n))
		}
	}
	mu.Lock()
	all = []string{a.Address(), c.Address()}
	mu.Unlock()
	for _, n := range []*gossip.Node{a, b, c, d} {
		testutil.WaitFor(t, 10*time.Second, "every member seen by "+n.Address(), func() bool { return metas(n) == "a=,b=,c=,d=" })
	}
}
