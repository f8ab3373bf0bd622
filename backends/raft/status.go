package raft

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lni/dragonboat/v4/raftio"

	"github.com/metaplane/metaplane/core"
)

// contacts records, per Raft address, the latest connection event of this
// member's transport (Dragonboat's system events): a connection set up to
// the address, or a connection that failed. It is the evidence Status uses
// for a member's reachability besides the progress reports.
type contacts struct {
	mu sync.Mutex
	by map[string]contactEvent
	// own: the transport's connections report themselves (steadyConn,
	// which never fails towards Dragonboat): Dragonboat's events for
	// message connections are then ignored.
	own bool
}

type contactEvent struct {
	ok     bool      // the latest event is a connection set up
	at     time.Time // when the latest event was
	lastOK time.Time // when a connection was last set up (zero: never)
}

func newContacts() *contacts { return &contacts{by: map[string]contactEvent{}} }

func (c *contacts) record(addr string, ok bool) {
	now := time.Now()
	c.mu.Lock()
	e := c.by[addr]
	e.ok, e.at = ok, now
	if ok {
		e.lastOK = now
	}
	c.by[addr] = e
	c.mu.Unlock()
}

func (c *contacts) get(addr string) (contactEvent, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.by[addr]
	return e, ok
}

// ConnectionEstablished is a Dragonboat system event
// (raftio.ISystemEventListener); so are the methods below, of which only
// the connection events are used.
func (c *contacts) ConnectionEstablished(i raftio.ConnectionInfo) {
	if !i.SnapshotConnection && !c.own {
		c.record(i.Address, true)
	}
}

// ConnectionFailed is a Dragonboat system event.
func (c *contacts) ConnectionFailed(i raftio.ConnectionInfo) {
	if !i.SnapshotConnection && !c.own {
		c.record(i.Address, false)
	}
}

func (c *contacts) NodeHostShuttingDown()                     {}
func (c *contacts) NodeUnloaded(raftio.NodeInfo)              {}
func (c *contacts) NodeDeleted(raftio.NodeInfo)               {}
func (c *contacts) NodeReady(raftio.NodeInfo)                 {}
func (c *contacts) MembershipChanged(raftio.NodeInfo)         {}
func (c *contacts) SendSnapshotStarted(raftio.SnapshotInfo)   {}
func (c *contacts) SendSnapshotCompleted(raftio.SnapshotInfo) {}
func (c *contacts) SendSnapshotAborted(raftio.SnapshotInfo)   {}
func (c *contacts) SnapshotReceived(raftio.SnapshotInfo)      {}
func (c *contacts) SnapshotRecovered(raftio.SnapshotInfo)     {}
func (c *contacts) SnapshotCreated(raftio.SnapshotInfo)       {}
func (c *contacts) SnapshotCompacted(raftio.SnapshotInfo)     {}
func (c *contacts) LogCompacted(raftio.EntryInfo)             {}
func (c *contacts) LogDBCompacted(raftio.EntryInfo)           {}

var _ raftio.ISystemEventListener = (*contacts)(nil)

// membershipView is the shard's membership as this member last read it.
type membershipView struct {
	voters, nonVoting, witnesses map[uint64]string
}

// membership returns the shard's membership: read from the state machine
// (a ReadIndex, bounded by one election timeout) when a leader is known,
// else the last one read, else the voters this member's replica knows
// (Dragonboat's shard info, which lists voters only). It never waits for
// a quorum longer than the bound.
func (m *member) membership(ctx context.Context, leaderKnown bool) membershipView {
	if leaderKnown {
		rctx, cancel := context.WithTimeout(ctx, m.opts.ElectionTimeout)
		ms, err := m.nh.SyncGetShardMembership(rctx, shardID)
		cancel()
		if err == nil {
			v := membershipView{voters: ms.Nodes, nonVoting: ms.NonVotings, witnesses: ms.Witnesses}
			m.mu.Lock()
			m.lastMembership = &v
			m.mu.Unlock()
			return v
		}
	}
	m.mu.Lock()
	last := m.lastMembership
	m.mu.Unlock()
	if last != nil {
		return *last
	}
	v := membershipView{voters: map[uint64]string{}}
	if nhi := m.nh.GetNodeHostInfo(dragonboatSkipLogInfo); nhi != nil {
		for _, si := range nhi.ShardInfoList {
			if si.ShardID == shardID {
				for id, addr := range si.Replicas {
					v.voters[id] = addr
				}
			}
		}
	}
	return v
}

// status is this member's view for Status. It does not need a quorum: the
// membership read is bounded (see membership) and everything else is local.
func (m *member) status(ctx context.Context) core.Status {
	m.mu.Lock()
	leader, term, applied := m.raftLeader, m.raftTerm, m.applied
	info, hasLeader := m.currentLeaderLocked()
	progress := make(map[uint64]followerProgress, len(m.progress))
	for k, v := range m.progress {
		progress[k] = v
	}
	m.mu.Unlock()
	now := time.Now()
	var lags, unreachable []string
	// A report older than this says nothing about the follower now.
	staleProgress := 3 * m.opts.SessionTimeout
	st := core.Status{Backend: "raft", MemberID: strconv.FormatUint(m.replicaID, 10), Epoch: int64(term),
		AppliedIndex: int64(applied), Revision: int64(applied), Details: map[string]string{},
		ClusterID: strconv.FormatUint(m.clusterID, 10), ProposalsFailed: m.proposalsFailed.Load()}
	m.disk.details(st.Details)
	switch {
	case leader == m.replicaID:
		st.Role = core.RoleLeader
	case leader == 0:
		st.Role = core.RoleCandidate
	default:
		st.Role = core.RoleFollower
	}
	if leader != 0 {
		st.LeaderID = strconv.FormatUint(leader, 10)
	}
	if hasLeader {
		st.LeaderAddress = info.Address
		st.Details["leaderCandidateId"] = info.ID
	}
	if lr, err := m.nh.GetLogReader(shardID); err == nil {
		state, _ := lr.NodeState()
		st.CommitIndex = int64(state.Commit)
		st.SnapshotIndex = int64(lr.Snapshot().Index)
	}
	if st.CommitIndex < st.AppliedIndex {
		st.CommitIndex = st.AppliedIndex
	}
	// A follower whose leader has gone silent does not ask it for the
	// membership (the read would wait up to an election timeout for a
	// leader that may be gone): it reports the membership it read last.
	mv := m.membership(ctx, leader != 0 && !m.leaderSilent(leader, now))
	type entry struct {
		id   uint64
		addr string
		kind core.MemberKind
	}
	var all []entry
	for id, a := range mv.voters {
		all = append(all, entry{id, a, core.MemberVoter})
	}
	for id, a := range mv.nonVoting {
		all = append(all, entry{id, a, core.MemberNonVoting})
	}
	for id, a := range mv.witnesses {
		all = append(all, entry{id, a, core.MemberWitness})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].id < all[j].id })
	for _, e := range all {
		ms := core.MemberStatus{ID: strconv.FormatUint(e.id, 10), Address: e.addr, Kind: e.kind}
		switch {
		case leader == 0:
			ms.Role = core.RoleUnknown
		case e.id == leader:
			ms.Role = core.RoleLeader
		default:
			ms.Role = core.RoleFollower
		}
		if e.id == m.replicaID {
			if leader == 0 {
				ms.Role = core.RoleCandidate
			}
			ms.MatchIndex = st.AppliedIndex
			ms.Lag = st.CommitIndex - st.AppliedIndex
			ms.Reachable, ms.LastContact = true, now
			ms.SnapshotIndex = st.SnapshotIndex
			st.Members = append(st.Members, ms)
			continue
		}
		p, hasP := progress[e.id]
		if hasP && now.Sub(p.at) >= staleProgress {
			hasP = false
		}
		if hasP {
			ms.MatchIndex, ms.Lag = int64(p.applied), p.lag
			lags = append(lags, fmt.Sprintf("%d:%d", e.id, p.lag))
		}
		if m.heard == nil {
			legacyReach(&ms, p, hasP, m.contacts, e.addr)
		} else {
			m.reach(&ms, e.id, p, hasP, leader, now)
		}
		if e.kind == core.MemberVoter && !ms.Reachable {
			unreachable = append(unreachable, fmt.Sprintf("%d (%s)", e.id, e.addr))
		}
		st.Members = append(st.Members, ms)
	}
	st.Details["raftRole"] = string(st.Role)
	st.Details["raftTerm"] = strconv.FormatUint(term, 10)
	st.Details["raftCommitIndex"] = strconv.FormatInt(st.CommitIndex, 10)
	st.Details["raftAppliedIndex"] = strconv.FormatInt(st.AppliedIndex, 10)
	st.Details["raftApplyLag"] = strconv.FormatInt(st.CommitIndex-st.AppliedIndex, 10)
	// Per-follower lag: from the applied index each voter reports in its
	// clients' renewal records (approximate: as of the last renewal).
	if len(lags) > 0 {
		st.Details["raftFollowerLag"] = strings.Join(lags, ",")
	} else {
		st.Details["raftFollowerLag"] = "unknown"
	}
	st.Details["clusterId"] = st.ClusterID
	if len(unreachable) > 0 {
		st.Details["raftUnreachableVoters"] = strings.Join(unreachable, ",")
	}
	return st
}

// reach decides whether the member ms (replica id) is reachable from this
// member now, from evidence no older than the minimum election timeout
// (ElectionRTT ticks: the time in which a leader's check-quorum gives up
// on followers that do not answer, and a follower's timer on a silent
// leader; heartbeats come at least four times in it), so that a leader
// cut off has counted its followers unreachable by the time it steps
// down and never says it knows no leader while reaching a quorum:
//
//   - a message received from it (the transport records every sender):
//     the leader hears its followers' answers every heartbeat, a follower
//     hears its leader;
//   - on a follower that hears its leader, a progress report of the
//     member that is not stale (the member renewed its sessions through
//     the leader, which this member hears: it is in the quorum as seen
//     through the leader; followers send each other nothing between
//     elections);
//   - a connection to it opened recently, unless a failed connect or send
//     came after.
//
// Older evidence says nothing about the member now: a member cut off by
// the network has only old evidence of every peer, and reports them
// unreachable (it used to count a connection opened before the cut as a
// contact for as long as nothing failed, which under a silent drop is
// forever).
func (m *member) reach(ms *core.MemberStatus, id uint64, p followerProgress, hasP bool, leader uint64, now time.Time) {
	recent := m.opts.ElectionTimeout
	if m.leaderSilence > 0 {
		recent = 2 * m.leaderSilence // the leader watch's silence is half the minimum election timeout
	}
	fresh := func(at time.Time) bool { return !at.IsZero() && now.Sub(at) < recent }
	last := m.heard.lastHeard(id)
	ms.LastContact = last
	ms.Reachable = fresh(last)
	if hasP && leader != 0 && leader != m.replicaID && id != leader && fresh(m.heard.lastHeard(leader)) {
		ms.Reachable = true
		if p.at.After(ms.LastContact) {
			ms.LastContact = p.at
		}
	}
	if c, ok := m.contacts.get(ms.Address); ok {
		switch {
		case c.ok && fresh(c.at):
			ms.Reachable = true
			if c.at.After(ms.LastContact) {
				ms.LastContact = c.at
			}
		case !c.ok && c.at.After(ms.LastContact):
			ms.Reachable = false
			if c.lastOK.After(ms.LastContact) {
				ms.LastContact = c.lastOK
			}
		}
	}
}

// legacyReach is the reachability of a member without the observed
// transport (fast failover off): the latest evidence wins, a progress
// report applied here (fresh enough) or a connection set up is a contact,
// a failed connection after them is not.
func legacyReach(ms *core.MemberStatus, p followerProgress, hasP bool, cs *contacts, addr string) {
	if hasP {
		ms.Reachable, ms.LastContact = true, p.at
	}
	if c, ok := cs.get(addr); ok {
		switch {
		case c.ok && c.at.After(ms.LastContact):
			ms.Reachable, ms.LastContact = true, c.at
		case !c.ok && c.at.After(ms.LastContact):
			ms.Reachable = false
			if c.lastOK.After(ms.LastContact) {
				ms.LastContact = c.lastOK
			}
		}
	}
}
