package raft

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/metaplane/metaplane/backends/raft/fsm"
	"github.com/metaplane/metaplane/core"
	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
)

// leadership is a client's leadership: held while this member is Raft
// leader in the term its leader record was appended in, and the record is
// the last applied one.
type leadership struct {
	c     *Client
	epoch int64
	term  uint64

	once sync.Once
	lost chan struct{}
}

var _ core.Leadership = (*leadership)(nil)

// Epoch is the leadership's epoch (the Raft term of its leader record).
func (l *leadership) Epoch() int64 { return l.epoch }

// Fence is the fence for this leader's writes (Token = Epoch).
func (l *leadership) Fence() core.Fence {
	return core.Fence{Epoch: l.epoch, Token: l.epoch, Valid: true}
}

// Lost is closed when Raft leadership moves (another leader or a new term),
// when a later leader record is applied, on Resign, or when the client's
// session ends.
func (l *leadership) Lost() <-chan struct{} { return l.lost }

func (l *leadership) lose() {
	l.once.Do(func() { close(l.lost) })
	m := l.c.m
	m.mu.Lock()
	if m.holder == l {
		m.holder = nil
		m.broadcastChangeLocked()
	}
	m.mu.Unlock()
	l.c.mu.Lock()
	if l.c.lead == l {
		l.c.lead = nil
	}
	l.c.mu.Unlock()
}

// dropHolderLocked ends the local leadership; m.mu is held.
func (m *member) dropHolderLocked() {
	h := m.holder
	m.holder = nil
	h.once.Do(func() { close(h.lost) })
}

// Resign appends a resign record so that the fence is stale, then ends the
// leadership. Idempotent. It gives up at once when this member knows no
// Raft leader (the leadership ended with the Raft leadership). Errors:
// ErrUnavailable (the leadership is ended anyway), context errors.
func (l *leadership) Resign(ctx context.Context) error {
	select {
	case <-l.lost:
		return nil
	default:
	}
	// Without a Raft leader the record cannot commit, and the leadership
	// ended with the Raft leadership anyway: do not wait.
	res, err := l.c.m.proposeBestEffort(ctx, &raftv1.Command{Body: &raftv1.Command_Resign{Resign: &raftv1.Resign{Epoch: l.epoch}}})
	l.lose()
	if err != nil {
		return err
	}
	return fsm.CodeError(res)
}

// Campaign blocks until this client leads: its member is Raft leader, no
// other client of the member leads, and its leader record (carrying the
// term) has been appended and applied, which also means every earlier entry
// has been applied (bounded by coordinator.raft.catchup.timeout). Errors:
// context errors, ErrClosed.
func (c *Client) Campaign(ctx context.Context, cand core.Candidate) (core.Leadership, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	m := c.m
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, errClosed
		}
		isLeader := m.raftLeader == m.replicaID
		ready := isLeader && m.holder == nil && !m.reserved
		_, held := m.currentLeaderLocked()
		knownLeader := m.raftLeader != 0
		term, wait := m.raftTerm, m.changeC
		if ready {
			m.reserved = true
		}
		m.mu.Unlock()
		if !ready {
			// On a follower, when no coordinator leads, ask for Raft
			// leadership (after a delay staggered by replica id, so the
			// leader's own candidates and one follower go first).
			var transfer <-chan time.Time
			var t *time.Timer
			if !isLeader && !held && knownLeader {
				t = time.NewTimer(m.transferDelay())
				transfer = t.C
			}
			var err error
			select {
			case <-wait:
			case <-transfer:
				m.requestTransfer(ctx)
			case <-ctx.Done():
				err = ctx.Err()
			case <-c.stop:
				err = errClosed
			}
			if t != nil {
				t.Stop()
			}
			if err != nil {
				return nil, err
			}
			continue
		}
		l, err := c.appendLeader(ctx, cand, term)
		m.mu.Lock()
		m.reserved = false
		m.broadcastChangeLocked()
		m.mu.Unlock()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if cerr := c.check(); cerr != nil {
				return nil, cerr
			}
			m.opts.Logf("raft: campaign of %s: %v; retrying", cand.ID, err)
			select {
			case <-time.After(TickInterval):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			continue
		}
		if l != nil {
			return l, nil
		}
	}
}

// transferDelay is how long a follower with a waiting candidate waits,
// once no coordinator leads, before asking for Raft leadership.
func (m *member) transferDelay() time.Duration {
	return 2*TickInterval + time.Duration(m.replicaID-1)*m.opts.ElectionTimeout/2
}

// requestTransfer asks the Raft leader to hand leadership to this member,
// if a linearizable read confirms that no coordinator leads.
func (m *member) requestTransfer(ctx context.Context) {
	v, err := m.read(ctx, fsm.LeaderQuery{}, false)
	if err != nil {
		return
	}
	ls := v.(*raftv1.LeaderState)
	m.mu.Lock()
	if m.leaderSt == nil || m.leaderSt.GetIndex() <= ls.GetIndex() {
		m.leaderSt = ls
		m.publishLeaderLocked()
	}
	_, held := m.currentLeaderLocked()
	follower := m.raftLeader != m.replicaID && m.raftLeader != 0
	m.mu.Unlock()
	if held || !follower {
		return
	}
	m.opts.Logf("raft: member %d asks for Raft leadership for a waiting candidate", m.replicaID)
	_ = m.nh.RequestLeaderTransfer(shardID, m.replicaID)
}

// appendLeader appends the leader record of term and installs the
// leadership if the member is still leader in that term once it applied.
// It returns nil, nil when leadership moved meanwhile.
func (c *Client) appendLeader(ctx context.Context, cand core.Candidate, term uint64) (*leadership, error) {
	m := c.m
	cctx, cancel := context.WithTimeout(ctx, m.opts.CatchupTimeout)
	defer cancel()
	res, err := m.propose(cctx, &raftv1.Command{Body: &raftv1.Command_Leader{Leader: &raftv1.LeaderRecord{
		Term: term, CandidateId: cand.ID, Address: cand.Address, ReplicaId: m.replicaID, Session: c.Session().ID}}})
	if err != nil {
		return nil, err
	}
	if err := fsm.CodeError(res); err != nil {
		return nil, err
	}
	l := &leadership{c: c, epoch: res.GetValue(), term: term, lost: make(chan struct{})}
	m.mu.Lock()
	ok := !m.closed && m.raftLeader == m.replicaID && m.raftTerm == term && m.holder == nil &&
		m.leaderSt != nil && m.leaderSt.GetEpoch() == l.epoch && !m.leaderSt.GetResigned()
	if ok {
		m.holder = l
	}
	m.mu.Unlock()
	if !ok {
		return nil, nil
	}
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.lead = l
	}
	c.mu.Unlock()
	if closed {
		l.lose()
		return nil, errClosed
	}
	return l, nil
}

// currentLeader is the leader as this member knows it: the last applied
// leader record, if its replica is the Raft leader in the record's term and
// it has not resigned.
func (m *member) currentLeaderLocked() (core.LeaderInfo, bool) {
	return leaderFrom(m.leaderSt, m.raftLeader, m.raftTerm)
}

// leaderFrom is the coordinator leader given the last leader record and
// the Raft leader and term.
func leaderFrom(ls *raftv1.LeaderState, raftLeader, raftTerm uint64) (core.LeaderInfo, bool) {
	if ls == nil || ls.GetEpoch() == 0 || ls.GetResigned() || raftLeader == 0 ||
		ls.GetReplicaId() != raftLeader || ls.GetTerm() != raftTerm {
		return core.LeaderInfo{}, false
	}
	return core.LeaderInfo{ID: ls.GetCandidateId(), Address: ls.GetAddress(), Epoch: ls.GetEpoch()}, true
}

// Leader returns the current leader after a linearizable read of the last
// leader record. Errors: ErrNotFound when no coordinator leads,
// ErrUnavailable, ErrClosed.
func (c *Client) Leader(ctx context.Context) (core.LeaderInfo, error) {
	if err := c.check(); err != nil {
		return core.LeaderInfo{}, err
	}
	v, err := c.m.read(ctx, fsm.LeaderQuery{}, false)
	if err != nil {
		return core.LeaderInfo{}, err
	}
	ls := v.(*raftv1.LeaderState)
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leaderSt == nil || m.leaderSt.GetIndex() <= ls.GetIndex() {
		m.leaderSt = ls
		m.publishLeaderLocked()
	}
	info, ok := m.currentLeaderLocked()
	if !ok {
		// The leadership event may not have reached the listener yet: ask
		// the replica itself.
		if lid, term, valid, err := m.nh.GetLeaderID(shardID); err == nil && valid {
			info, ok = leaderFrom(m.leaderSt, lid, term)
		}
	}
	if !ok {
		return core.LeaderInfo{}, fmt.Errorf("%w: no coordinator leads", core.ErrNotFound)
	}
	return info, nil
}

// ObserveLeader delivers the current leader (if any) and every change, as
// this member learns of them. Errors: ErrClosed.
func (c *Client) ObserveLeader(ctx context.Context) (<-chan core.LeaderInfo, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	// Bring every observer up to date first, so that the current leader
	// handed to this one is also the last one published.
	m.publishLeaderLocked()
	var current []core.LeaderInfo
	if info, ok := m.currentLeaderLocked(); ok {
		current = append(current, info)
	}
	// A buffer of one: the latest leader wins.
	return c.leaders.Subscribe(ctx, 1, current...), nil
}

// publishLeaderLocked delivers the current coordinator leader to every
// client's observers when it differs from the last one delivered. It is
// called with m.mu held after anything that may change the leader. After a
// period without a leader, the leader is delivered again even if it is the
// same one (so that an observer that subscribed meanwhile gets it).
func (m *member) publishLeaderLocked() {
	info, ok := m.currentLeaderLocked()
	if !ok {
		m.published = core.LeaderInfo{}
		return
	}
	if info == m.published {
		return
	}
	m.published = info
	for c := range m.clients {
		c.leaders.Publish(info)
	}
}
