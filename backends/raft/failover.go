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
// fifty took two or three terms, 1.3 to 1.9 s (docs/benchmarks-history.md).
//
// A follower here also watches the leader: the transport below records
// when each peer was last heard from. When the leader has been silent for
// half the minimum election timeout, the follower probes the leader's
// Raft address; a connection refused suggests no process listens there
// (it exited or was killed; a machine that is down or cut off by dropped
// packets does not refuse, and then Raft's own timers decide as before).
// A firewall's REJECT refuses too, on one path only: so a follower that
// sees the silence and the refusal tells the other voters (a "leader
// lost" notice), and nobody campaigns early unless a majority of the
// voters, itself included, saw both within the last silence. The
// survivors then agree on one successor, the lowest-numbered voter
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
	// contacts receives the connections' own reachability reports (the
	// transport's connections never fail towards Dragonboat, whose
	// connection events then say nothing; see steadyConn).
	contacts *contacts
	// lost is, per peer, the latest "leader lost" notice it sent (see
	// lostNotice); tcp is the transport the notices leave by.
	lost map[uint64]lostNote
	tcp  raftio.ITransport
	// sending marks the peers a notice is being sent to (one at a time
	// each).
	sending map[string]bool
	// peerSilence is the minimum election timeout: a connection whose
	// peer sent nothing for that long is replaced (steadyConn). Set
	// before the transport starts.
	peerSilence time.Duration
}

// lostNote is a peer's notice that it has heard nothing from leader for
// the leader watch's silence.
type lostNote struct {
	leader uint64
	at     time.Time // when it arrived
}

func newHeard(c *contacts) *heard {
	return &heard{last: map[uint64]time.Time{}, contacts: c, lost: map[uint64]lostNote{}, sending: map[string]bool{}}
}

// factory is a Dragonboat transport factory: its TCP transport with the
// receive path observed by h and steady connections.
func (h *heard) factory() dbconfig.TransportFactory { return heardFactory{h} }

type heardFactory struct{ h *heard }

func (f heardFactory) Create(c dbconfig.NodeHostConfig, handler raftio.MessageHandler, chunks raftio.ChunkHandler) raftio.ITransport {
	tcp := newTCPTransport(c, f.h.observe(handler), chunks)
	f.h.mu.Lock()
	f.h.deliver, f.h.did, f.h.tcp = handler, c.GetDeploymentID(), tcp
	f.h.mu.Unlock()
	return steadyTransport{ITransport: tcp, contacts: f.h.contacts, unreachable: f.h.unreachable, silent: f.h.silent}
}

// steadyTransport is Dragonboat's TCP transport with connections that
// never report a failure to Dragonboat (steadyConn).
//
// Why: Dragonboat keeps a circuit breaker per peer address in front of
// its connections. One failed connect or send trips it, and while it is
// open (half a second, growing to a second while failures go on) every
// message to that address is dropped before any connection is tried. A
// peer that was down and came back is therefore cut off from a member
// that had tried to reach it, for up to a second after its restart: in
// the election bench a survivor's vote for the restarted member was
// dropped that way (the vote was cast, its answer never sent), the
// election waited for Raft's own timers, and the failover took a second
// instead of a quarter (docs/benchmarks-history.md).
type steadyTransport struct {
	raftio.ITransport
	contacts *contacts
	// unreachable, when set, is told every batch dropped because its
	// peer could not be reached (heard.unreachable).
	unreachable func(pb.MessageBatch)
	// silent, when set, says whether a peer has sent nothing since a time
	// for longer than the minimum election timeout (heard.silent).
	silent func(peer uint64, since, now time.Time) bool
}

// GetConnection always returns a connection: one that is not open yet
// connects on its first batch.
func (t steadyTransport) GetConnection(ctx context.Context, target string) (raftio.IConnection, error) {
	sc := &steadyConn{t: t.ITransport, target: target, contacts: t.contacts, unreachable: t.unreachable, silent: t.silent}
	sc.connect(time.Now())
	return sc, nil
}

// steadyConn is a connection to one peer that takes every batch: it sends
// it on the open connection, or opens one (again) first, and drops the
// batch when the peer cannot be reached, without an error. Raft tolerates
// lost messages (a heartbeat, an append or a vote is sent again), and the
// transport's queue to the peer stays: the first batch after the peer is
// back goes out, whatever happened before.
//
//   - A send that fails with a reset or a broken pipe (a connection opened
//     before the peer restarted fails on its next write) is sent again,
//     once, on a new connection: without it that batch (a vote request,
//     the first message of an election to the peer) would be lost.
//   - A connection that sent nothing for idleReconnect is replaced before
//     its next batch: between two followers a connection carries nothing
//     from one election to the next, and if the peer restarted meanwhile a
//     write into the old connection can succeed before the peer's reset
//     comes back (on a network with a round trip) and the batch is lost
//     silently.
//   - After a connect failed, batches in the next redialPause are dropped
//     without trying, so a peer that is down costs a connect attempt per
//     pause and not per message.
//   - A connect runs in the background: a batch waits for it at most
//     dialWait and is dropped if it has not opened by then (the next batch
//     waits for the same attempt). Dragonboat's own dial waits up to five
//     seconds for a peer whose answers are dropped (a firewall's DROP, or
//     a REJECT of the peer's SYN-ACK on this side), and the transport's
//     queue to the peer fills behind it meanwhile: the leader's appends of
//     those seconds, delivered all at once when the path heals.
//   - An open connection whose peer has sent this member nothing for the
//     minimum election timeout since it opened (every peer answers what
//     it is sent: a follower each heartbeat, a voter each vote request) is
//     closed before the next batch and connected again: under dropped
//     packets a connection opened before the fault takes every write into
//     the kernel's buffer without an error, and the leader appended every
//     entry to a follower that received none of them; when the path
//     healed, TCP delivered megabytes of stale appends at once.
//   - Every batch dropped is reported to the local replica as its peer
//     being unreachable (Dragonboat's Unreachable, which its own transport
//     sends when a connection fails; see heard.unreachable): a leader
//     stops streaming appends to that follower (the follower's progress
//     goes to retry, one append per heartbeat answer) until it answers
//     again. Without it the leader appended every entry to a follower it
//     could not reach; the queue to it held thousands of them when the
//     path healed, and their answers filled the leader's receive queue,
//     where the other follower's heartbeat answers were then dropped: the
//     leader stepped down on a lost quorum, or stalled past the other
//     follower's election timeout (internal/netfault, one-way refusal).
//
// Reachability goes to contacts (raft status): a connection opened is a
// contact; a connect or a send that failed, or a connect still not open
// after dialWait, is not.
type steadyConn struct {
	t           raftio.ITransport
	target      string
	contacts    *contacts
	unreachable func(pb.MessageBatch)
	silent      func(peer uint64, since, now time.Time) bool
	c           raftio.IConnection // nil: none open
	openedAt    time.Time          // when c opened
	dial        *pendingDial       // the connect under way (nil: none)
	lastSend    time.Time
	failedAt    time.Time // the last connect that failed (zero: none since one opened)
	reportedAt  time.Time // the last batch reported unreachable
}

// pendingDial is a connect running in the background.
type pendingDial struct {
	done      chan struct{} // closed once c, err are set
	mu        sync.Mutex
	c         raftio.IConnection
	err       error
	abandoned bool // the steadyConn closed meanwhile: c is closed on arrival
}

// idleReconnect: see steadyConn. Connections to and from the leader carry
// a heartbeat every HeartbeatRTT; with a heartbeat interval of a second or
// more each heartbeat opens a new connection, which costs a connect and
// nothing else.
const idleReconnect = time.Second

// redialPause: see steadyConn. Well under the shortest election timeout a
// member accepts (300 ms), so a peer that comes back during an election
// is reached within the election.
const redialPause = 50 * time.Millisecond

// dialWait: see steadyConn. A connect on a network that answers takes a
// round trip; this is the longest a batch (and the transport's queue
// behind it) waits for one.
const dialWait = 100 * time.Millisecond

// reportEvery bounds the unreachable reports of one connection (each is a
// message in the local replica's receive queue).
const reportEvery = 10 * time.Millisecond

func (r *steadyConn) opened(c raftio.IConnection) {
	r.c, r.failedAt, r.openedAt = c, time.Time{}, time.Now()
	if r.contacts != nil {
		r.contacts.record(r.target, true)
	}
}

func (r *steadyConn) failed(now time.Time) {
	if r.c != nil {
		r.c.Close()
		r.c = nil
	}
	r.failedAt = now
	if r.contacts != nil {
		r.contacts.record(r.target, false)
	}
}

// connect opens a connection unless one is open or the last attempt
// failed less than redialPause ago, waiting for it at most dialWait; it
// reports whether one is open.
func (r *steadyConn) connect(now time.Time) bool {
	if r.c != nil {
		return true
	}
	if r.dial == nil {
		if !r.failedAt.IsZero() && now.Sub(r.failedAt) < redialPause {
			return false
		}
		d := &pendingDial{done: make(chan struct{})}
		r.dial = d
		t, target := r.t, r.target
		go func() {
			c, err := t.GetConnection(context.Background(), target)
			d.mu.Lock()
			d.c, d.err = c, err
			abandoned := d.abandoned
			d.mu.Unlock()
			if abandoned && c != nil {
				c.Close()
			}
			close(d.done)
		}()
	}
	wait := time.NewTimer(dialWait)
	defer wait.Stop()
	select {
	case <-r.dial.done:
	case <-wait.C:
		if r.contacts != nil {
			r.contacts.record(r.target, false)
		}
		return false
	}
	d := r.dial
	r.dial = nil
	if d.err != nil {
		r.failed(time.Now())
		return false
	}
	r.opened(d.c)
	return true
}

// drop reports b, which is not sent, as sent to a peer that could not be
// reached.
func (r *steadyConn) drop(b pb.MessageBatch, now time.Time) {
	if r.unreachable != nil && now.Sub(r.reportedAt) >= reportEvery {
		r.reportedAt = now
		r.unreachable(b)
	}
}

// SendMessageBatch sends b or drops it; it never fails (see steadyConn).
func (r *steadyConn) SendMessageBatch(b pb.MessageBatch) error {
	now := time.Now()
	if r.c != nil && !r.lastSend.IsZero() && now.Sub(r.lastSend) > idleReconnect {
		r.c.Close()
		r.c = nil
	}
	r.lastSend = now
	if r.c != nil && r.silent != nil {
		for _, m := range b.Requests {
			if m.ShardID == shardID && m.To != 0 {
				if r.silent(m.To, r.openedAt, now) {
					// Connected again at once (no redial pause): the
					// batch may be a vote request, to a peer that did
					// not need to say anything since.
					r.c.Close()
					r.c = nil
				}
				break
			}
		}
	}
	b.Requests = coalesceHeartbeats(b.Requests, pb.Heartbeat)
	if !r.connect(now) {
		r.drop(b, now)
		return nil
	}
	err := r.c.SendMessageBatch(b)
	if err == nil {
		return nil
	}
	r.c.Close()
	r.c = nil
	if !(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		r.failed(now)
		r.drop(b, now)
		return nil
	}
	if !r.connect(now) {
		r.drop(b, now)
		return nil
	}
	if err := r.c.SendMessageBatch(b); err != nil {
		r.failed(now)
		r.drop(b, now)
	}
	return nil
}

func (r *steadyConn) Close() {
	if r.c != nil {
		r.c.Close()
		r.c = nil
	}
	if d := r.dial; d != nil {
		r.dial = nil
		d.mu.Lock()
		d.abandoned = true
		c := d.c
		d.mu.Unlock()
		if c != nil {
			c.Close()
		}
	}
}

// Validate is Dragonboat's own check of a host:port Raft address.
func (heardFactory) Validate(addr string) bool { return stringutil.IsValidAddress(addr) }

// observe wraps the transport's handler: every batch comes from one
// NodeHost, so its first message of the shard names the sender. The
// leader watch's notices (lostNotice) are taken out of the batch here and
// never reach Dragonboat.
func (h *heard) observe(next raftio.MessageHandler) raftio.MessageHandler {
	return func(b pb.MessageBatch) {
		now := time.Now()
		noted := false
		for i := range b.Requests {
			if r := &b.Requests[i]; r.ShardID == shardID && r.From != 0 {
				h.mu.Lock()
				h.last[r.From] = now
				h.mu.Unlock()
				break
			}
		}
		for i := range b.Requests {
			if isLostNotice(&b.Requests[i]) {
				noted = true
				break
			}
		}
		if noted {
			kept := make([]pb.Message, 0, len(b.Requests))
			for _, r := range b.Requests {
				if isLostNotice(&r) {
					if r.Reject {
						h.mu.Lock()
						h.lost[r.From] = lostNote{leader: r.Hint, at: now}
						h.mu.Unlock()
					}
					continue
				}
				kept = append(kept, r)
			}
			if len(kept) == 0 {
				return
			}
			b.Requests = kept
		}
		b.Requests = coalesceHeartbeats(b.Requests, pb.HeartbeatResp)
		next(b)
	}
}

// coalesceHeartbeats keeps, of the messages of type typ (Heartbeat or
// HeartbeatResp) in one batch, only the last one of each peer, term and
// kind (carrying a ReadIndex context or not); every other message stays,
// in its order.
//
// Why: a leader sends a heartbeat to every follower for each batch of
// linearizable reads (ReadIndex), hundreds a second under load, and
// handles every answer from a follower whose log is behind by reading
// the whole gap from the Raft log and sending it again (Dragonboat's
// retry state: each heartbeat answer unpauses the follower). A follower
// back from a partition answered every one of them: the leader read the
// same thousand entries from Pebble for each answer, its step loop
// stalled for up to a second and a half, its receive queue overflowed and
// dropped the other follower's answers, and it stepped down on a lost
// quorum, or the other follower's election timeout ran out
// (internal/netfault, one-way refusal). The ones dropped lose nothing:
// a heartbeat's commit index is the leader's (capped at the follower's
// match), never lower in a later one, and confirming a read context
// confirms every earlier one (Dragonboat's readIndex.confirm releases the
// queue up to it), so the last answer of a batch does what all of them
// did.
func coalesceHeartbeats(reqs []pb.Message, typ pb.MessageType) []pb.Message {
	type key struct {
		peer, term uint64
		hinted     bool
	}
	var last map[key]int
	n := 0
	for i := range reqs {
		if reqs[i].Type != typ {
			continue
		}
		n++
		if last == nil {
			last = map[key]int{}
		}
		m := &reqs[i]
		peer := m.From
		if typ == pb.Heartbeat {
			peer = m.To
		}
		last[key{peer, m.Term, m.Hint != 0 || m.HintHigh != 0}] = i
	}
	if n == len(last) {
		return reqs
	}
	keep := make(map[int]bool, len(last))
	for _, i := range last {
		keep[i] = true
	}
	out := make([]pb.Message, 0, len(reqs)-n+len(last))
	for i, m := range reqs {
		if m.Type != typ || keep[i] {
			out = append(out, m)
		}
	}
	return out
}

// lostMarker marks a leader watch's notice: a message of type NoOP at
// term 0 (which Raft would ignore if it ever got through) whose HintHigh
// is this value and whose Hint names the leader lost. Reject set: the
// sender's own probe of the leader was refused (a notice without it, from
// an earlier version that sent one on silence alone, is not counted).
const lostMarker = 0x6c6f7374 // "lost"

func isLostNotice(m *pb.Message) bool {
	return m.Type == pb.NoOP && m.ShardID == shardID && m.Term == 0 && m.HintHigh == lostMarker && m.From != 0
}

// lostNotice sends peer (at addr) this member's notice that it has heard
// nothing from leader for the watch's silence and that leader's Raft
// address refused its connection, in the background on a connection of
// its own (a notice to a peer whose last one is still on its way is not
// sent).
func (h *heard) lostNotice(self, peer, leader uint64, addr string, timeout time.Duration) {
	h.mu.Lock()
	tcp, did := h.tcp, h.did
	if tcp == nil || h.sending[addr] {
		h.mu.Unlock()
		return
	}
	h.sending[addr] = true
	h.mu.Unlock()
	go func() {
		defer func() {
			h.mu.Lock()
			delete(h.sending, addr)
			h.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		c, err := tcp.GetConnection(ctx, addr)
		if err != nil {
			return
		}
		defer c.Close()
		c.SendMessageBatch(pb.MessageBatch{DeploymentId: did, BinVer: raftio.TransportBinVersion,
			Requests: []pb.Message{{Type: pb.NoOP, ShardID: shardID, From: self, To: peer, Hint: leader, HintHigh: lostMarker, Reject: true}}})
	}()
}

// lostBy counts the peers other than leader whose notice that they lost
// leader (silent, and refusing their connection) arrived within the last
// window.
func (h *heard) lostBy(leader uint64, window time.Duration, now time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for peer, l := range h.lost {
		if peer != leader && l.leader == leader && now.Sub(l.at) < window {
			n++
		}
	}
	return n
}

// silent says whether peer has sent nothing since since (or its last
// message, if later) for longer than peerSilence (zero: never silent).
func (h *heard) silent(peer uint64, since, now time.Time) bool {
	if h.peerSilence <= 0 {
		return false
	}
	h.mu.Lock()
	last := h.last[peer]
	h.mu.Unlock()
	if last.Before(since) {
		last = since
	}
	return now.Sub(last) > h.peerSilence
}

// lastHeard is when replica id was last heard from (zero: never).
func (h *heard) lastHeard(id uint64) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last[id]
}

// unreachable tells the local replica that the peers b was addressed to
// could not be reached, as Dragonboat's own transport does when a
// connection fails (an Unreachable message from each peer: a leader puts
// the peer's progress into retry, the other roles ignore it). Term 0:
// outside any term, like the transport's own.
func (h *heard) unreachable(b pb.MessageBatch) {
	h.mu.Lock()
	deliver, did := h.deliver, h.did
	h.mu.Unlock()
	if deliver == nil {
		return
	}
	var reqs []pb.Message
	for _, m := range b.Requests {
		if m.ShardID != shardID || m.To == 0 || m.From == 0 || isLostNotice(&m) {
			continue
		}
		if !slices.ContainsFunc(reqs, func(u pb.Message) bool { return u.From == m.To && u.To == m.From }) {
			reqs = append(reqs, pb.Message{Type: pb.Unreachable, ShardID: shardID, From: m.To, To: m.From})
		}
	}
	if len(reqs) > 0 {
		deliver(pb.MessageBatch{DeploymentId: did, BinVer: raftio.TransportBinVersion, Requests: reqs})
	}
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

// leaderSilent says whether leader, another member, has sent this member
// nothing for longer than the leader watch's silence (as of now): the
// watch is probing it or a successor is campaigning. A leader never heard
// from (a member just restarted) is not silent.
func (m *member) leaderSilent(leader uint64, now time.Time) bool {
	if m.heard == nil || m.leaderSilence == 0 || leader == 0 || leader == m.replicaID {
		return false
	}
	last := m.heard.lastHeard(leader)
	return !last.IsZero() && now.Sub(last) > m.leaderSilence
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
		noticed time.Time // the silence the notices below are about
		notices int       // the notices sent in it
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
		if !last.Equal(noticed) {
			noticed, notices = last, 0
		}
		if tries >= attempts || time.Since(last) < ft.silence {
			continue
		}
		view := m.localMembership()
		addr, ok := view.voters[suspect]
		if _, voter := view.voters[m.replicaID]; !ok || !voter {
			continue
		}
		// The silence alone proves nothing: a leader that stalled for a
		// moment (a slow disk, a busy machine) is silent to every
		// follower at once. A refused connection alone proves nothing
		// either: a firewall refusing this member's packets (REJECT with
		// a TCP reset) looks the same from here, while the leader still
		// leads the others. The leader's process is gone for the quorum
		// only when a majority of the voters each see both, the silence
		// and the refusal: every voter that does tells the others, and a
		// successor campaigns only with enough such notices that with
		// itself they make a majority. Otherwise the others would grant a
		// vote that deposes a healthy leader (the TimeoutNow campaign
		// bypasses their lease): with one follower refused by the leader
		// and the leader pausing for a few hundred milliseconds, the
		// other follower's silence and this one's refusal deposed it
		// (internal/netfault, one-way refusal).
		if notices >= maxNotices || m.disk.refusal() != nil {
			continue
		}
		notices++
		if !refused(addr, ft.probe) {
			continue
		}
		for id, a := range view.voters {
			if id != suspect && id != m.replicaID {
				m.heard.lostNotice(m.replicaID, id, suspect, a, ft.probe)
			}
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
		if 1+m.heard.lostBy(suspect, ft.silence, time.Now()) < len(view.voters)/2+1 {
			continue
		}
		tries++
		m.mu.Lock()
		still := m.raftLeader == suspect || m.raftLeader == 0
		m.mu.Unlock()
		if still && m.heard.timeoutNow(m.replicaID, suspect) {
			m.opts.Logf("raft: leader %d at %s refuses connections (its process is gone) and was silent for %v, as it was for %d other voters: member %d campaigns now (successor %d of %d, attempt %d)",
				suspect, addr, time.Since(last).Round(time.Millisecond), m.heard.lostBy(suspect, ft.silence, time.Now()), m.replicaID, rank+1, successors, tries)
		}
	}
}

// attempts bounds a successor's campaigns in one silence of the leader.
const attempts = 5

// maxNotices bounds the rounds of "leader lost" notices a member sends in
// one silence of the leader (one round a poll).
const maxNotices = 4 * attempts

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
