package raft

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"
	_ "unsafe" // go:linkname: Dragonboat's TCP transport constructor

	dbconfig "github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/lni/goutils/stringutil"
)

// Fast failover when the leader's process is gone.
//
// Raft elects a new leader once a follower's randomized election timeout
// passes without a word from the leader: at least ElectionRTT ticks, at
// most twice that. Two survivors whose timeouts fire close together both
// campaign and split the vote (each then waits another timeout), and a
// pre-vote that reaches a survivor still inside its minimum timeout is
// dropped (the candidate waits again): with three voters a few kills in
// fifty took two or three terms, 1.3 to 1.9 s (docs/benchmarks.md).
//
// A follower here also watches the leader: the transport below records
// when each peer was last heard from. When the leader has been silent for
// half the minimum election timeout, the follower probes the leader's
// Raft address; a connection refused means no process listens there (it
// exited or was killed; a machine that is down or cut off does not
// refuse, and then Raft's own timers decide as before). The survivors then
// agree without a message on one successor, the lowest-numbered voter
// other than the leader, which campaigns at once as a leader-transfer
// target would (Dragonboat's TimeoutNow, delivered to itself): no
// pre-vote round, and the others grant the vote although the leader's
// lease has not run out on their clocks. The next voter in that order
// does the same a quarter of the timeout later if no leader came of it
// (the first successor is gone too, or its log is behind). Campaigning is
// always safe in Raft; what this changes is only who campaigns first, and
// how soon.

//go:linkname newTCPTransport github.com/lni/dragonboat/v4/internal/transport.NewTCPTransport
func newTCPTransport(dbconfig.NodeHostConfig, raftio.MessageHandler, raftio.ChunkHandler) raftio.ITransport

// heard is what a member's transport heard: when each peer of the shard
// last sent a message, and the way to hand a message to the local
// NodeHost as if it had arrived.
type heard struct {
	mu      sync.Mutex
	last    map[uint64]time.Time // replica id: when its last message arrived
	deliver raftio.MessageHandler
	did     uint64 // the deployment id deliver checks
}

func newHeard() *heard { return &heard{last: map[uint64]time.Time{}} }

// factory is a Dragonboat transport factory: its TCP transport with the
// receive path observed by h.
func (h *heard) factory() dbconfig.TransportFactory { return heardFactory{h} }

type heardFactory struct{ h *heard }

func (f heardFactory) Create(c dbconfig.NodeHostConfig, handler raftio.MessageHandler, chunks raftio.ChunkHandler) raftio.ITransport {
	f.h.mu.Lock()
	f.h.deliver, f.h.did = handler, c.GetDeploymentID()
	f.h.mu.Unlock()
	return resendTransport{newTCPTransport(c, f.h.observe(handler), chunks)}
}

// resendTransport is a transport whose connections send a batch again,
// once, on a new connection when the one they hold turns out to be
// broken (reset by the peer, or a broken pipe): a connection opened to a
// peer before it restarted fails on its next write, and without this the
// batch written then (a vote request, the first message of an election
// to that peer) is lost and the election waits another timeout. Raft
// tolerates a message delivered twice.
type resendTransport struct{ raftio.ITransport }

func (t resendTransport) GetConnection(ctx context.Context, target string) (raftio.IConnection, error) {
	c, err := t.ITransport.GetConnection(ctx, target)
	if err != nil {
		return nil, err
	}
	return &resendConn{t: t.ITransport, target: target, c: c}, nil
}

type resendConn struct {
	t        raftio.ITransport
	target   string
	c        raftio.IConnection
	lastSend time.Time
}

// idleReconnect: a connection that sent nothing for this long is replaced
// by a new one before its next batch. Between two followers a connection
// carries nothing from one election to the next; if the peer restarted
// meanwhile, a write into the old connection can succeed before the
// peer's reset comes back (on a network with a round trip), and the batch
// (a vote request) is lost without an error. Connections to and from the
// leader carry a heartbeat every HeartbeatRTT (100 ms by default); with a
// heartbeat interval of a second or more each heartbeat opens a new
// connection, which costs a connect and nothing else.
const idleReconnect = time.Second

func (r *resendConn) SendMessageBatch(b pb.MessageBatch) error {
	now := time.Now()
	if !r.lastSend.IsZero() && now.Sub(r.lastSend) > idleReconnect {
		r.c.Close()
		c, err := r.t.GetConnection(context.Background(), r.target)
		if err != nil {
			r.c = closedConn{}
			return err
		}
		r.c = c
	}
	r.lastSend = now
	err := r.c.SendMessageBatch(b)
	if err == nil || !(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		return err
	}
	r.c.Close()
	c, gerr := r.t.GetConnection(context.Background(), r.target)
	if gerr != nil {
		r.c = closedConn{}
		return err
	}
	r.c = c
	return r.c.SendMessageBatch(b)
}

func (r *resendConn) Close() { r.c.Close() }

// closedConn stands for a connection that could not be opened again: its
// sends fail (the transport then opens a new connection itself).
type closedConn struct{}

func (closedConn) SendMessageBatch(pb.MessageBatch) error { return net.ErrClosed }
func (closedConn) Close()                                 {}

// Validate is Dragonboat's own check of a host:port Raft address.
func (heardFactory) Validate(addr string) bool { return stringutil.IsValidAddress(addr) }

// observe wraps the transport's handler: every batch comes from one
// NodeHost, so its first message of the shard names the sender.
func (h *heard) observe(next raftio.MessageHandler) raftio.MessageHandler {
	return func(b pb.MessageBatch) {
		for i := range b.Requests {
			if r := &b.Requests[i]; r.ShardID == shardID && r.From != 0 {
				now := time.Now()
				h.mu.Lock()
				h.last[r.From] = now
				h.mu.Unlock()
				break
			}
		}
		next(b)
	}
}

// lastHeard is when replica id was last heard from (zero: never).
func (h *heard) lastHeard(id uint64) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last[id]
}

// timeoutNow hands the local replica self a TimeoutNow, as the leader
// does to its leader-transfer target: it campaigns at once, and its vote
// requests carry the hint that lets the others grant them inside the
// leader's lease. Term 0 is a message outside any term (Dragonboat
// handles it in whatever term the replica is in); a replica that is no
// longer a follower ignores it.
func (h *heard) timeoutNow(self, from uint64) bool {
	h.mu.Lock()
	deliver, did := h.deliver, h.did
	h.mu.Unlock()
	if deliver == nil {
		return false
	}
	deliver(pb.MessageBatch{DeploymentId: did, BinVer: raftio.TransportBinVersion,
		Requests: []pb.Message{{Type: pb.TimeoutNow, ShardID: shardID, To: self, From: from}}})
	return true
}

// failoverTiming is when the watch acts: every poll it looks at the
// leader; after silence without a word from it the first successor
// probes, and each next one stagger later. Successors past the second
// leave it to Raft's own timers.
type failoverTiming struct {
	poll, silence, stagger, probe time.Duration
}

// successors is how many voters, in order, act on a refused leader.
const successors = 2

func newFailoverTiming(tick time.Duration, electionRTT uint64) failoverTiming {
	minTimeout := time.Duration(electionRTT) * tick
	return failoverTiming{
		poll:    max(minTimeout/8, 10*time.Millisecond),
		silence: minTimeout / 2,
		stagger: minTimeout / 4,
		probe:   max(minTimeout/4, 20*time.Millisecond),
	}
}

// successorRank is self's place among the voters other than leader, in
// ascending id order, or -1 when self is not one of them.
func successorRank(voters []uint64, leader, self uint64) int {
	rest := make([]uint64, 0, len(voters))
	for _, v := range voters {
		if v != leader {
			rest = append(rest, v)
		}
	}
	slices.Sort(rest)
	return slices.Index(rest, self)
}

// refused says whether nothing listens at addr: a connection refused
// (the leader's process is gone). Any other answer, a connection
// included, says nothing of the kind.
func refused(addr string, timeout time.Duration) bool {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// failoverLoop is the member's leader watch (see the top of this file).
// After silence, successor k acts at silence + k*stagger and again every
// successors*stagger while the leader stays silent and no other leader is
// known (at most attempts times): a campaign whose vote request was lost
// (a stale connection to a peer that restarted) or that came too early
// is tried again, and the successors' attempts never coincide.
func (m *member) failoverLoop(ft failoverTiming) {
	defer m.wg.Done()
	var (
		suspect uint64    // the leader last known
		since   time.Time // when it became the one known
		quiet   time.Time // the last word from suspect that the current silence follows
		tries   int       // this member's attempts in the current silence
	)
	t := time.NewTicker(ft.poll)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.mu.Lock()
		leader := m.raftLeader
		m.mu.Unlock()
		if leader != 0 && leader != suspect {
			suspect, since = leader, time.Now()
		}
		if suspect == 0 || suspect == m.replicaID || leader == m.replicaID {
			continue
		}
		last := m.heard.lastHeard(suspect)
		if last.Before(since) {
			last = since
		}
		if !last.Equal(quiet) {
			quiet, tries = last, 0 // it spoke since: a new silence
		}
		if tries >= attempts || time.Since(last) < ft.silence {
			continue
		}
		view := m.localMembership()
		addr, ok := view.voters[suspect]
		if !ok {
			continue
		}
		ids := make([]uint64, 0, len(view.voters))
		for id := range view.voters {
			ids = append(ids, id)
		}
		rank := successorRank(ids, suspect, m.replicaID)
		at := ft.silence + time.Duration(rank)*ft.stagger + time.Duration(tries*successors)*ft.stagger
		if rank < 0 || rank >= successors || time.Since(last) < at {
			continue
		}
		tries++
		if m.disk.refusal() != nil || !refused(addr, ft.probe) {
			continue
		}
		m.mu.Lock()
		still := m.raftLeader == suspect || m.raftLeader == 0
		m.mu.Unlock()
		if still && m.heard.timeoutNow(m.replicaID, suspect) {
			m.opts.Logf("raft: leader %d at %s refuses connections (its process is gone) and was silent for %v: member %d campaigns now (successor %d of %d, attempt %d)",
				suspect, addr, time.Since(last).Round(time.Millisecond), m.replicaID, rank+1, successors, tries)
		}
	}
}

// attempts bounds a successor's campaigns in one silence of the leader.
const attempts = 5

// localMembership is this member's own view of the voters, read without
// a quorum (the leader may be gone).
func (m *member) localMembership() membershipView {
	v := membershipView{voters: map[uint64]string{}}
	if nhi := m.nh.GetNodeHostInfo(dragonboatSkipLogInfo); nhi != nil {
		for _, si := range nhi.ShardInfoList {
			if si.ShardID == shardID && !si.IsNonVoting && !si.IsWitness {
				for id, addr := range si.Replicas {
					v.voters[id] = addr
				}
			}
		}
	}
	return v
}
