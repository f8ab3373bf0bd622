package raft

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	dbconfig "github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"

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
// refused connections, within the watch's budget of campaigns for one
// silence (each raises the term at most once): usually one or two terms
// (the first successor's log may be behind the other's, which then wins),
// more on a loaded machine where a campaign came too early or its vote
// request was lost and was tried again (CI saw three).
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
	if budget := uint64(successors * attempts); v.term <= old.term || v.term > old.term+budget {
		t.Errorf("member %d leads in term %d; want a term after %d, at most %d later (the watch's campaigns in one silence)", got+1, v.term, old.term, budget)
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

// tcpPeer is a Dragonboat TCP transport listening on addr whose handler
// counts the batches it received.
type tcpPeer struct {
	t  interface{ Close() error }
	mu sync.Mutex
	n  int
}

func (p *tcpPeer) received() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func startTCPPeer(t *testing.T, addr string) *tcpPeer {
	t.Helper()
	p := &tcpPeer{}
	tr := newTCPTransport(dbconfig.NodeHostConfig{RaftAddress: addr}, func(pb.MessageBatch) {
		p.mu.Lock()
		p.n++
		p.mu.Unlock()
	}, func(pb.Chunk) bool { return true })
	if err := tr.Start(); err != nil {
		t.Fatalf("start a transport on %s: %v", addr, err)
	}
	p.t = tr
	return p
}

// TestSteadyConnReachesAPeerThatCameBack: the member's connections never
// fail towards Dragonboat (whose circuit breaker would then drop every
// message to the peer for up to a second): a batch to a peer that is down
// is dropped without an error and reported unreachable, and once the peer
// listens again (restarted on the same address) batches reach it, on the
// same connection object, within a few redial pauses.
func TestSteadyConnReachesAPeerThatCameBack(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	cs := newContacts()
	local := newTCPTransport(dbconfig.NodeHostConfig{RaftAddress: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))},
		func(pb.MessageBatch) {}, func(pb.Chunk) bool { return true })
	st := steadyTransport{ITransport: local, contacts: cs}
	defer st.Close()
	batch := pb.MessageBatch{BinVer: raftio.TransportBinVersion,
		Requests: []pb.Message{{Type: pb.Heartbeat, ShardID: shardID, To: 2, From: 1}}}

	// Nothing listens: a connection anyway, sends that do not fail, and
	// the peer recorded unreachable.
	conn, err := st.GetConnection(context.Background(), addr)
	if err != nil {
		t.Fatalf("GetConnection to a peer that is down: %v, want a connection that connects later", err)
	}
	defer conn.Close()
	if err := conn.SendMessageBatch(batch); err != nil {
		t.Fatalf("send to a peer that is down: %v, want the batch dropped without an error", err)
	}
	if c, ok := cs.get(addr); !ok || c.ok {
		t.Fatalf("contact with a peer that is down: %+v (recorded %v), want unreachable", c, ok)
	}

	// sendUntil sends batches until the peer has received one more than
	// before, bounded; every send must succeed.
	sendUntil := func(p *tcpPeer, what string) {
		t.Helper()
		before := p.received()
		deadline := time.Now().Add(10 * time.Second)
		for p.received() == before {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no batch reached the peer within 10s", what)
			}
			if err := conn.SendMessageBatch(batch); err != nil {
				t.Fatalf("%s: send: %v, want no error", what, err)
			}
			time.Sleep(redialPause / 5) // pacing of a bounded retry loop, not a synchronisation
		}
		if c, ok := cs.get(addr); !ok || !c.ok {
			t.Fatalf("%s: contact %+v, want reachable", what, c)
		}
	}
	p := startTCPPeer(t, addr)
	sendUntil(p, "the peer started")

	// The peer goes away and comes back on the same address (a restart).
	p.t.Close()
	for i := 0; i < 5; i++ {
		if err := conn.SendMessageBatch(batch); err != nil {
			t.Fatalf("send to a peer that stopped: %v, want the batch dropped without an error", err)
		}
	}
	p = startTCPPeer(t, addr)
	defer p.t.Close()
	sendUntil(p, "the peer restarted")
}

// TestLeaderSilent: a follower's status skips the membership read (which
// waits for the leader) once the leader has sent nothing for the watch's
// silence; a leader never heard from, the member itself and a member
// without the watch are never silent.
func TestLeaderSilent(t *testing.T) {
	now := time.Now()
	h := newHeard(newContacts())
	h.last[1] = now.Add(-time.Second)
	h.last[2] = now.Add(-50 * time.Millisecond)
	m := &member{replicaID: 3, heard: h, leaderSilence: 200 * time.Millisecond}
	for _, c := range []struct {
		leader uint64
		want   bool
	}{
		{1, true},  // silent for a second
		{2, false}, // heard 50 ms ago
		{4, false}, // never heard from
		{3, false}, // itself
		{0, false}, // no leader
	} {
		if got := m.leaderSilent(c.leader, now); got != c.want {
			t.Errorf("leaderSilent(%d) = %v, want %v", c.leader, got, c.want)
		}
	}
	if (&member{replicaID: 3}).leaderSilent(1, now) {
		t.Errorf("a member without the leader watch reported its leader silent")
	}
}

// TestCoalesceHeartbeats: of the heartbeats (or their answers) in one
// batch only the last of each peer, term and kind (with a read context or
// without) stays; every other message keeps its place.
func TestCoalesceHeartbeats(t *testing.T) {
	hb := func(to, term, hint uint64) pb.Message {
		return pb.Message{Type: pb.Heartbeat, ShardID: shardID, From: 1, To: to, Term: term, Hint: hint}
	}
	rep := pb.Message{Type: pb.Replicate, ShardID: shardID, From: 1, To: 2, Term: 2, LogIndex: 7}
	in := []pb.Message{hb(2, 2, 11), hb(3, 2, 11), rep, hb(2, 2, 12), hb(2, 2, 0), hb(2, 2, 13), hb(2, 2, 0), hb(2, 3, 14)}
	got := coalesceHeartbeats(append([]pb.Message(nil), in...), pb.Heartbeat)
	want := []pb.Message{hb(3, 2, 11), rep, hb(2, 2, 13), hb(2, 2, 0), hb(2, 3, 14)}
	if len(got) != len(want) {
		t.Fatalf("coalesced to %d messages, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].Type != want[i].Type || got[i].To != want[i].To || got[i].Term != want[i].Term || got[i].Hint != want[i].Hint || got[i].LogIndex != want[i].LogIndex {
			t.Errorf("message %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	// Answers are told apart by their sender; a batch without duplicates
	// is returned as it is.
	resp := func(from, hint uint64) pb.Message {
		return pb.Message{Type: pb.HeartbeatResp, ShardID: shardID, From: from, To: 1, Term: 2, Hint: hint}
	}
	got = coalesceHeartbeats([]pb.Message{resp(2, 5), resp(3, 5), resp(2, 6)}, pb.HeartbeatResp)
	if len(got) != 2 || got[0].From != 3 || got[1].From != 2 || got[1].Hint != 6 {
		t.Errorf("answers coalesced to %+v, want member 3's and member 2's last", got)
	}
	one := []pb.Message{resp(2, 5), resp(3, 5)}
	if got := coalesceHeartbeats(one, pb.HeartbeatResp); len(got) != 2 {
		t.Errorf("a batch without duplicates changed: %+v", got)
	}
}

// TestUnreachableReported: a batch dropped for want of a connection tells
// the local replica that each peer it was addressed to is unreachable,
// once per peer, and a leader-lost notice among it is not reported.
func TestUnreachableReported(t *testing.T) {
	h := newHeard(newContacts())
	var got []pb.Message
	h.deliver = func(b pb.MessageBatch) { got = append(got, b.Requests...) }
	h.unreachable(pb.MessageBatch{Requests: []pb.Message{
		{Type: pb.Heartbeat, ShardID: shardID, From: 1, To: 2},
		{Type: pb.Replicate, ShardID: shardID, From: 1, To: 2},
		{Type: pb.NoOP, ShardID: shardID, From: 1, To: 3, Hint: 2, HintHigh: lostMarker, Reject: true},
	}})
	if len(got) != 1 || got[0].Type != pb.Unreachable || got[0].From != 2 || got[0].To != 1 {
		t.Fatalf("reported %+v, want one Unreachable from 2 to 1", got)
	}
}

// TestPeerSilent: a connection's peer is silent once it sent nothing for
// peerSilence since the later of its last message and the connection's
// opening; without peerSilence nothing is silent.
func TestPeerSilent(t *testing.T) {
	now := time.Now()
	h := newHeard(newContacts())
	h.peerSilence = 400 * time.Millisecond
	h.last[2] = now.Add(-time.Second)
	h.last[3] = now.Add(-100 * time.Millisecond)
	opened := now.Add(-2 * time.Second)
	if !h.silent(2, opened, now) {
		t.Errorf("a peer heard a second ago on a connection opened two seconds ago is not silent")
	}
	if h.silent(2, now.Add(-200*time.Millisecond), now) {
		t.Errorf("a connection opened 200 ms ago counted its peer silent")
	}
	if h.silent(3, opened, now) {
		t.Errorf("a peer heard 100 ms ago counted silent")
	}
	if !h.silent(4, opened, now) {
		t.Errorf("a peer never heard on a connection opened two seconds ago is not silent")
	}
	h.peerSilence = 0
	if h.silent(2, opened, now) {
		t.Errorf("silent without peerSilence")
	}
}
