package raft

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/internal/testutil"
)

func TestSuccessorRank(t *testing.T) {
	for _, c := range []struct {
		voters       []uint64
		leader, self uint64
		want         int
	}{
		{[]uint64{1, 2, 3}, 1, 2, 0},
		{[]uint64{1, 2, 3}, 1, 3, 1},
		{[]uint64{3, 1, 2}, 2, 1, 0},
		{[]uint64{3, 1, 2}, 2, 3, 1},
		{[]uint64{5, 4, 3, 2, 1}, 1, 4, 2},
		{[]uint64{1, 2, 3}, 1, 1, -1}, // the leader itself
		{[]uint64{1, 2, 3}, 1, 7, -1}, // not a voter
	} {
		if got := successorRank(c.voters, c.leader, c.self); got != c.want {
			t.Errorf("successorRank(%v, leader %d, self %d) = %d, want %d", c.voters, c.leader, c.self, got, c.want)
		}
	}
}

func TestRefusedProbe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if refused(l.Addr().String(), time.Second) {
		t.Errorf("a listening address counted as refused")
	}
	free := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	if !refused(free, time.Second) {
		t.Errorf("%s, where nothing listens, not counted as refused", free)
	}
}

// TestTimeoutNowMovesLeadership: the message the leader watch hands its
// own replica makes that follower campaign at once and win, although the
// leader is alive and its lease has not run out on the others' clocks.
func TestTimeoutNowMovesLeadership(t *testing.T) {
	c := startCluster(t, 3, nil)
	defer c.stopAll()
	l := c.waitLeader()
	f := (l + 1) % 3
	m := c.members[f].m
	before := c.view(f)
	if !m.heard.timeoutNow(m.replicaID, uint64(l+1)) {
		t.Fatal("timeoutNow: no handler recorded from the transport")
	}
	testutil.WaitFor(t, 5*time.Second, fmt.Sprintf("member %d to lead", f+1), func() bool { return c.leader() == f })
	if after := c.view(f); after.term <= before.term {
		t.Errorf("member %d leads in term %d, not above %d", f+1, after.term, before.term)
	}
}

// TestLeaderWatchElectsTheSuccessor: with Raft's own timers far away (the
// minimum election timeout 2 s, the watch acting after 1 s of silence),
// stopping the leader's NodeHost gets a new leader through the watch: one
// of the two successors, which says it campaigned because the leader
// refused connections, within two terms (the first successor's log may be
// behind the other's, which then wins).
func TestLeaderWatchElectsTheSuccessor(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	c := startCluster(t, 3, func(_ int, o *Options) {
		o.ElectionTimeout, o.Heartbeat = 5*time.Second, 100*time.Millisecond
		o.Logf = func(format string, args ...any) {
			mu.Lock()
			lines = append(lines, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
	})
	defer c.stopAll()
	l := c.waitLeader()
	old := c.view(l)
	c.stop(l)
	testutil.WaitFor(t, 20*time.Second, "a new leader", func() bool { return c.leader() >= 0 })
	got := c.leader()
	v := c.view(got)
	if v.term <= old.term || v.term > old.term+2 {
		t.Errorf("member %d leads in term %d; want a term after %d, at most two later", got+1, v.term, old.term)
	}
	mu.Lock()
	defer mu.Unlock()
	found := false
	for _, s := range lines {
		if strings.Contains(s, "refuses connections") && strings.Contains(s, fmt.Sprintf("member %d campaigns now", got+1)) {
			found = true
		}
	}
	if !found {
		t.Errorf("member %d leads but logged no campaign after the leader refused connections; lines: %q", got+1, lines)
	}
}
