package raft

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/client"
	dbconfig "github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/logger"
	"github.com/lni/dragonboat/v4/raftio"
	sm "github.com/lni/dragonboat/v4/statemachine"

	"github.com/metaplane/metaplane/backends/raft/fsm"
	"github.com/metaplane/metaplane/backends/raft/logstore"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/protocodec"
	"github.com/metaplane/metaplane/internal/retry"
	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
)

// shardID is the one Raft shard of a metaplane cluster.
const shardID = 1

var quietOnce sync.Once

// quietDragonboat sets how much of Dragonboat's and Pebble's own logging
// (plain lines on stderr) this process lets through, once, from the level
// of the default slog logger (a plugin's follows its host's, see
// plugins.EnvLogLevel): errors only, unless that logger is at debug
// (Dragonboat's informational records: elections, votes, connections,
// breakers) or below (its debug records as well).
func quietDragonboat() {
	quietOnce.Do(func() {
		level := logger.ERROR
		ctx := context.Background()
		switch {
		case slog.Default().Enabled(ctx, slog.LevelDebug-4):
			level = logger.DEBUG
		case slog.Default().Enabled(ctx, slog.LevelDebug):
			level = logger.INFO
		}
		for _, p := range []string{"dragonboat", "raft", "rsm", "transport", "logdb", "config", "settings",
			"grpc", "registry", "tan", "fileutil", "server", "vfs", "raftpb", "logdb/kv"} {
			logger.GetLogger(p).SetLevel(level)
		}
	})
}

// member is this process's Raft voter: the NodeHost, the state machine and
// what the member tracks outside the store (Raft leadership, session
// clocks, the local leadership holder, apply notifications).
type member struct {
	opts      Options
	replicaID uint64
	clusterID uint64
	nh        *dragonboat.NodeHost
	sm        *fsm.FSM
	noop      *client.Session
	heard     *heard // the transport's record of peers heard from (failover.go); nil when off
	// leaderSilence is how long the leader may send nothing before the
	// leader watch suspects it (failoverTiming.silence); 0 when off.
	leaderSilence time.Duration

	mu         sync.Mutex
	closed     bool
	raftLeader uint64
	raftTerm   uint64
	leaderSt   *raftv1.LeaderState
	applied    uint64
	applyC     chan struct{} // closed and replaced after every applied batch
	changeC    chan struct{} // closed and replaced on every leadership change
	// published is the leader last given to ObserveLeader's observers.
	published  core.LeaderInfo
	leases     map[int64]*leaseClock
	expiring   map[int64]bool
	holder     *leadership          // the local leadership, if any
	reserved   bool                 // a local campaign is proposing its record
	expiredFns map[int64]func()     // session id -> the owning client's callback
	clients    map[*Client]struct{} // open clients
	// progress: each voter's applied index as last reported in a renewal
	// record, and the lag it had when that record was applied here.
	progress map[uint64]followerProgress
	// contacts: the transport's latest connection event per Raft address;
	// lastMembership: the shard membership as last read (status only).
	contacts       *contacts
	lastMembership *membershipView
	// proposalsFailed counts proposals that did not commit (Status).
	proposalsFailed atomic.Int64
	// ready: a linearizable read has succeeded on this member, so the
	// cluster has a leader that committed an entry of its term and this
	// member applied it (see awaitReady).
	ready atomic.Bool
	// proposing counts the proposals in propose now (tests wait on it).
	proposing atomic.Int64
	stop      chan struct{}
	wg        sync.WaitGroup
	// disk pauses the replica while Dir is short of space (diskfull.go).
	disk *diskGuard
	// logdb is the NodeHost's LogDB when it is lazyCommit (the default).
	logdb atomic.Pointer[logstore.LazyCommit]
}

// leaseClock is a session's deadline as this member sees it. Only the Raft
// leader acts on it.
type followerProgress struct {
	applied uint64
	lag     int64
	at      time.Time
}

type leaseClock struct {
	ttl        time.Duration
	deadline   time.Time
	renewIndex int64
}

// clusterIDFile holds the cluster id written at bootstrap.
const clusterIDFile = "cluster-id"

// deriveClusterID is the cluster id of a new cluster: a hash of its initial
// voter set, so every voter of one bootstrap computes the same id without
// talking to the others.
func deriveClusterID(voters []Voter) uint64 {
	items := make([]string, len(voters))
	for i, v := range voters {
		items[i] = fmt.Sprintf("%d@%s", v.ID, v.Address)
	}
	sort.Strings(items)
	h := fnv.New64a()
	h.Write([]byte(strings.Join(items, ",")))
	id := h.Sum64()
	if id == 0 {
		id = 1
	}
	return id
}

// loadOrWriteClusterID returns the cluster id in dir, or writes one: want
// when it is set (coordinator.raft.cluster-id), else the one derived from
// voters. A set want that differs from the id in dir is refused.
func loadOrWriteClusterID(dir string, voters []Voter, want uint64) (uint64, error) {
	p := filepath.Join(dir, clusterIDFile)
	b, err := os.ReadFile(p)
	if err == nil {
		id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("coordinator.raft.dir: %s is damaged: %v", p, err)
		}
		if want != 0 && want != id {
			return 0, fmt.Errorf("%w: coordinator.raft.cluster-id is %d but coordinator.raft.dir %s belongs to cluster %d: "+
				"this directory is another cluster's (empty it to join cluster %d)", core.ErrInvalidArgument, want, dir, id, want)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("coordinator.raft.dir: %w", err)
	}
	id := want
	if id == 0 {
		id = deriveClusterID(voters)
	}
	tmp := p + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return 0, fmt.Errorf("coordinator.raft.dir: %w", err)
	}
	if _, err := fmt.Fprintf(f, "%d\n", id); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	return id, os.Rename(tmp, p)
}

func logDBConfig(profile string) dbconfig.LogDBConfig {
	var c dbconfig.LogDBConfig
	switch profile {
	case LogDBTiny:
		c = dbconfig.GetTinyMemLogDBConfig()
	case LogDBMedium:
		c = dbconfig.GetMediumMemLogDBConfig()
	case LogDBLarge:
		c = dbconfig.GetLargeMemLogDBConfig()
	default:
		c = dbconfig.GetSmallMemLogDBConfig()
	}
	// One shard group: one LogDB instance instead of sixteen (metaplane
	// runs a single Raft shard). Fixed for the life of the directory.
	c.Shards = 1
	return c
}

// nodeHostDir is the NodeHost's directory under coordinator.raft.dir.
const nodeHostDir = "nodehost"

// nodeHostConfig is the NodeHost configuration of member addr of cluster
// cid (without event listeners): the same for the running member and for
// the offline tools that open its directory.
func nodeHostConfig(o Options, cid uint64, addr string) dbconfig.NodeHostConfig {
	dir := filepath.Join(o.Dir, nodeHostDir)
	return dbconfig.NodeHostConfig{
		DeploymentID:   cid,
		NodeHostDir:    dir,
		RTTMillisecond: uint64(o.raftTick() / time.Millisecond),
		RaftAddress:    addr,
		ListenAddress:  o.ListenAddress,
		MutualTLS:      o.TLS,
		CAFile:         o.CAFile,
		CertFile:       o.CertFile,
		KeyFile:        o.KeyFile,
		Expert:         dbconfig.ExpertConfig{LogDB: logDBConfig(o.LogDBProfile), FS: o.storage.raft, LogDBFactory: logstore.Factory(o.logDB)},
	}
}

// ErrNotBootstrapped is wrapped by the refusal to start a member of a
// multi-voter cluster on a directory that `metaplane raft bootstrap` has
// not formatted.
var ErrNotBootstrapped = errors.New("raft: data directory not bootstrapped")

// errUnformatted is the refusal of an unformatted directory, saying what to run.
func errUnformatted(o Options) error {
	return fmt.Errorf("%w: coordinator.raft.dir %s holds no Raft state of member %d and coordinator.raft.voters lists %d voters: "+
		"a member of a multi-voter cluster does not format its directory itself; run `metaplane raft bootstrap --data-dir %s` "+
		"with this configuration on every initial voter (with an empty directory), then start the coordinators; "+
		"a member added to a running cluster sets coordinator.raft.join instead",
		ErrNotBootstrapped, o.Dir, o.NodeID, len(o.Voters), o.Dir)
}

// checkFormatted refuses, before anything is written, to start a member
// of a multi-voter cluster (not joining) on a directory that holds no
// cluster id: only Bootstrap formats one. A single voter (the zero-config
// `make run`) formats its directory on first start.
func checkFormatted(o Options) error {
	if o.Join || o.format || len(o.Voters) <= 1 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(o.Dir, clusterIDFile)); errors.Is(err, os.ErrNotExist) {
		return errUnformatted(o)
	}
	return nil
}

// startMember starts the NodeHost and the replica: a new cluster
// bootstraps with the initial voters, a member with Raft state on disk
// restarts from it, and a joining member (Options.Join) starts empty and
// waits for the leader to replicate to it.
func startMember(ctx context.Context, o Options) (*member, error) {
	o = o.withDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	quietDragonboat()
	hb, el, _ := electionTicks(o.Heartbeat, o.ElectionTimeout, o.raftTick())
	if err := checkFormatted(o); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("coordinator.raft.dir: %w", err)
	}
	bootVoters := o.Voters
	if o.Join && o.ClusterID == 0 {
		// A joiner told no cluster id (coordinator.raft.cluster-id, which
		// the coordinator learns from the running voters) derives it from
		// its list without itself: that must be the bootstrap voters.
		bootVoters = nil
		for _, v := range o.Voters {
			if v.ID != o.NodeID {
				bootVoters = append(bootVoters, v)
			}
		}
	}
	cid, err := loadOrWriteClusterID(o.Dir, bootVoters, o.ClusterID)
	if err != nil {
		return nil, err
	}
	m := &member{
		opts: o, replicaID: o.NodeID, clusterID: cid,
		applyC: make(chan struct{}), changeC: make(chan struct{}),
		leases: map[int64]*leaseClock{}, expiring: map[int64]bool{},
		expiredFns: map[int64]func(){}, clients: map[*Client]struct{}{}, progress: map[uint64]followerProgress{},
		contacts: newContacts(), stop: make(chan struct{}),
	}
	var addr string
	members := map[uint64]dragonboat.Target{}
	for _, v := range o.Voters {
		members[v.ID] = v.Address
		if v.ID == o.NodeID {
			addr = v.Address
		}
	}
	if err := checkOwner(o.Dir, o.NodeID, addr); err != nil {
		return nil, err
	}
	nhc := nodeHostConfig(o, cid, addr)
	nhc.RaftEventListener, nhc.SystemEventListener = m, m.contacts
	if !o.noFastFailover {
		m.contacts.own = true
		m.heard = newHeard(m.contacts)
		m.heard.peerSilence = time.Duration(el) * o.raftTick()
		nhc.Expert.TransportFactory = m.heard.factory()
	}
	if f, ok := nhc.Expert.LogDBFactory.(logstore.LazyCommitPebble); ok {
		f.Made = m.logdb.Store
		nhc.Expert.LogDBFactory = f
	}
	nh, err := openNodeHost(ctx, o, nhc)
	if err != nil {
		return nil, fmt.Errorf("%w: raft: start node host on %s: %v", core.ErrUnavailable, addr, err)
	}
	// Dragonboat took the address: record it where it is not yet (a
	// directory without the record is still checked against Dragonboat's,
	// so a full disk that refuses the write stops nothing).
	if err := writeMemberRecord(o.Dir, o.NodeID, addr); err != nil {
		o.Logf("raft: member %d: could not record its id and address in %s: %v", o.NodeID, o.Dir, err)
	}
	m.nh = nh
	m.noop = nh.GetNoOPSession(shardID)
	m.sm = fsm.New(filepath.Join(o.Dir, "state"), o.ChangeLogRetention, m.onApplied)
	m.sm.Fs = o.storage.state
	m.sm.Recovered = m.onRecovered
	m.sm.Observe = o.observeApply
	compaction := o.SnapshotThreshold / 2
	rc := dbconfig.Config{
		ReplicaID: o.NodeID, ShardID: shardID, CheckQuorum: true, PreVote: true,
		ElectionRTT: el, HeartbeatRTT: hb,
		SnapshotEntries: o.SnapshotThreshold, CompactionOverhead: compaction,
		MaxInMemLogSize: uint64(4 * o.SegmentSize),
	}
	var initial map[uint64]dragonboat.Target
	join := false
	marker := filepath.Join(o.Dir, nonVotingFile)
	switch {
	case nh.HasNodeInfo(shardID, o.NodeID):
		o.Logf("raft: member %d restarting from %s", o.NodeID, o.Dir)
		// A joined member restarts non-voting until it has seen its own
		// promotion (Dragonboat must be told which it is).
		if _, err := os.Stat(marker); err == nil {
			rc.IsNonVoting = true
		}
	case o.Join:
		join = true
		// A joining member is added as non-voting first (AddVoter), then
		// promoted: it starts non-voting.
		if err := writeFileSync(marker, []byte("non-voting until promoted\n")); err != nil {
			nh.Close()
			return nil, fmt.Errorf("coordinator.raft.dir: %w", err)
		}
		rc.IsNonVoting = true
		o.Logf("raft: member %d joining cluster %d as non-voting", o.NodeID, cid)
	case len(o.Voters) > 1 && !o.format:
		// The cluster id is there but no replica (a bootstrap that did
		// not finish): refuse as for an empty directory.
		nh.Close()
		return nil, errUnformatted(o)
	default:
		initial = members
		o.Logf("raft: member %d bootstrapping cluster %d with %d voters", o.NodeID, cid, len(members))
	}
	factory := func(uint64, uint64) sm.IOnDiskStateMachine { return m.sm }
	m.disk = newDiskGuard(m, rc, factory)
	running, err := m.disk.start(initial, join)
	if err != nil {
		nh.Close()
		return nil, fmt.Errorf("%w: raft: start replica %d: %v", core.ErrUnavailable, o.NodeID, err)
	}
	m.wg.Add(3)
	go m.disk.loop()
	go m.expiryLoop()
	go m.loadInitialState()
	if m.heard != nil {
		m.wg.Add(1)
		ft := newFailoverTiming(o.raftTick(), el)
		m.leaderSilence = ft.silence
		go m.failoverLoop(ft)
	}
	if rc.IsNonVoting {
		m.wg.Add(1)
		go m.awaitPromotion(marker)
	}
	// Give a new cluster its first election before returning (bounded by
	// coordinator.raft.first-election.timeout, plus one election timeout
	// since Dragonboat has no separate first timeout).
	wait := o.FirstElectionTimeout + o.ElectionTimeout
	if !running {
		wait = 0
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		m.mu.Lock()
		known, ch := m.raftLeader != 0, m.changeC
		m.mu.Unlock()
		if known {
			break
		}
		select {
		case <-ch:
			continue
		case <-t.C:
		case <-ctx.Done():
		}
		break
	}
	return m, nil
}

// LeaderUpdated is Dragonboat's leadership event (raftio.IRaftEventListener).
func (m *member) LeaderUpdated(info raftio.LeaderInfo) {
	if info.ShardID != shardID {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	wasLeader := m.raftLeader == m.replicaID
	m.raftLeader, m.raftTerm = info.LeaderID, info.Term
	isLeader := info.LeaderID == m.replicaID
	if isLeader && !wasLeader {
		// A new leader restarts every lease's clock.
		now := time.Now()
		for _, l := range m.leases {
			l.deadline = now.Add(l.ttl)
		}
		go m.loadLeases()
	}
	if h := m.holder; h != nil && (info.LeaderID != m.replicaID || info.Term != h.term) {
		m.dropHolderLocked()
	}
	m.broadcastChangeLocked()
}

func (m *member) broadcastChangeLocked() {
	close(m.changeC)
	m.changeC = make(chan struct{})
	m.publishLeaderLocked()
}

// loadLeases reads every session from the store into the clocks (a member
// that just became leader may not have seen them being granted).
func (m *member) loadLeases() {
	v, err := m.nh.StaleRead(shardID, fsm.SessionsQuery{})
	if err != nil {
		return
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range v.([]*raftv1.SessionRecord) {
		if _, ok := m.leases[s.GetId()]; !ok {
			m.leases[s.GetId()] = &leaseClock{ttl: time.Duration(s.GetTtlMs()) * time.Millisecond,
				deadline: now.Add(time.Duration(s.GetTtlMs()) * time.Millisecond), renewIndex: s.GetRenewIndex()}
		}
	}
}

// loadInitialState reads the applied index and the last leader record from
// the store once the state machine is open, so that a restarted member
// knows them before anything new is applied.
func (m *member) loadInitialState() {
	defer m.wg.Done()
	for {
		v, err := m.nh.StaleRead(shardID, fsm.LeaderQuery{})
		if err == nil {
			a, aerr := m.nh.StaleRead(shardID, fsm.AppliedQuery{})
			ls := v.(*raftv1.LeaderState)
			m.mu.Lock()
			if m.leaderSt == nil || m.leaderSt.GetIndex() < ls.GetIndex() {
				m.leaderSt = ls
			}
			if aerr == nil && uint64(a.(int64)) > m.applied {
				m.applied = uint64(a.(int64))
			}
			m.broadcastChangeLocked()
			m.mu.Unlock()
			return
		}
		select {
		case <-m.stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// onApplied is the state machine's hook after every committed batch.
func (m *member) onApplied(applied uint64, notes []fsm.ApplyNote) {
	now := time.Now()
	var expired []func()
	m.mu.Lock()
	m.applied = applied
	for _, n := range notes {
		switch n.Kind {
		case fsm.NoteSessionGranted, fsm.NoteSessionRenewed:
			ttl := time.Duration(n.TtlMs) * time.Millisecond
			m.leases[n.Session] = &leaseClock{ttl: ttl, deadline: now.Add(ttl), renewIndex: n.RenewIndex}
			if n.Replica != 0 && n.Reported != 0 {
				m.progress[n.Replica] = followerProgress{applied: n.Reported, lag: n.RenewIndex - int64(n.Reported), at: now}
			}
		case fsm.NoteSessionExpired:
			delete(m.leases, n.Session)
			delete(m.expiring, n.Session)
			if fn := m.expiredFns[n.Session]; fn != nil {
				expired = append(expired, fn)
			}
		case fsm.NoteLeader:
			if m.leaderSt == nil || m.leaderSt.GetIndex() <= n.Leader.GetIndex() {
				m.leaderSt = n.Leader
			}
			if h := m.holder; h != nil && (n.Leader.GetEpoch() != h.epoch || n.Leader.GetResigned()) {
				m.dropHolderLocked()
			}
			m.broadcastChangeLocked()
		}
	}
	close(m.applyC)
	m.applyC = make(chan struct{})
	m.mu.Unlock()
	for _, fn := range expired {
		fn()
	}
}

// onRecovered is the state machine's hook after a snapshot replaced the
// store (a member too far behind the leader's log, restarted or not). The
// entries the snapshot covers were never applied here one by one, so the
// leader record, the applied index and the session clocks are taken from
// the store as it now is, and observers and waiters are woken: without
// this, a member caught up by snapshot would keep the leader record it had
// before (ObserveLeader would deliver nothing, or a stale leader, until the
// next leader record).
func (m *member) onRecovered(st fsm.RecoveredState) {
	now := time.Now()
	var expired []func()
	m.mu.Lock()
	if st.Applied > m.applied {
		m.applied = st.Applied
	}
	// The snapshot is ahead of everything applied here: its leader record
	// is the latest one, whatever the local copy says.
	m.leaderSt = st.Leader
	if h := m.holder; h != nil && (st.Leader.GetEpoch() != h.epoch || st.Leader.GetResigned()) {
		m.dropHolderLocked()
	}
	stored := make(map[int64]bool, len(st.Sessions))
	for _, s := range st.Sessions {
		stored[s.GetId()] = true
		ttl := time.Duration(s.GetTtlMs()) * time.Millisecond
		if l, ok := m.leases[s.GetId()]; !ok || l.renewIndex != s.GetRenewIndex() {
			m.leases[s.GetId()] = &leaseClock{ttl: ttl, deadline: now.Add(ttl), renewIndex: s.GetRenewIndex()}
		}
	}
	for id := range m.leases {
		if stored[id] {
			continue
		}
		// Expired within the entries the snapshot covers.
		delete(m.leases, id)
		delete(m.expiring, id)
		if fn := m.expiredFns[id]; fn != nil {
			expired = append(expired, fn)
		}
	}
	m.broadcastChangeLocked()
	close(m.applyC)
	m.applyC = make(chan struct{})
	m.mu.Unlock()
	for _, fn := range expired {
		fn()
	}
}

// expiryLoop, on the Raft leader, expires sessions whose clock ran out by
// appending a SessionExpire record.
func (m *member) expiryLoop() {
	defer m.wg.Done()
	t := time.NewTicker(TickInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		var due []*raftv1.SessionExpire
		m.mu.Lock()
		if m.raftLeader == m.replicaID {
			for id, l := range m.leases {
				if now.After(l.deadline) && !m.expiring[id] {
					m.expiring[id] = true
					due = append(due, &raftv1.SessionExpire{Id: id, RenewIndex: l.renewIndex, Reason: "timeout"})
				}
			}
		}
		m.mu.Unlock()
		for _, x := range due {
			x := x
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), m.opts.ProposalTimeout)
				defer cancel()
				_, err := m.propose(ctx, &raftv1.Command{Body: &raftv1.Command_SessionExpire{SessionExpire: x}})
				m.mu.Lock()
				delete(m.expiring, x.Id)
				if err == nil {
					if l := m.leases[x.Id]; l != nil && l.renewIndex != x.RenewIndex {
						// renewed meanwhile: keep it
					} else if l != nil {
						// The expiry applied as a no-op elsewhere; look again later.
						l.deadline = time.Now().Add(l.ttl)
					}
				}
				m.mu.Unlock()
			}()
		}
	}
}

// touch restarts a session's clock on this member (an in-memory renewal,
// meaningful on the leader). It reports whether the session is known.
func (m *member) touch(id int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.leases[id]
	if l == nil || m.expiring[id] {
		// Unknown here, or an expiry is already in the log: only a
		// replicated renewal (ordered after it) gives the true answer.
		return false
	}
	l.deadline = time.Now().Add(l.ttl)
	return true
}

func (m *member) isLeader() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.raftLeader == m.replicaID
}

// notLeader builds the NotLeaderError of a call that needs the leader.
func (m *member) notLeader() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := &core.NotLeaderError{}
	if ls := m.leaderSt; ls != nil && ls.GetReplicaId() == m.raftLeader && m.raftLeader != 0 && !ls.GetResigned() {
		e.LeaderID, e.LeaderAddress = ls.GetCandidateId(), ls.GetAddress()
	}
	return e
}

// errClosed wraps ErrClosed.
var errClosed = fmt.Errorf("%w: raft backend closed", core.ErrClosed)

// mapErr maps a Dragonboat error to the contract's errors.
func (m *member) mapErr(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("raft: %s: %w", op, ctx.Err())
	}
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return errClosed
	}
	if errors.Is(err, fsm.ErrStoreClosed) {
		return errClosed
	}
	if errors.Is(err, dragonboat.ErrPayloadTooBig) {
		return fmt.Errorf("%w: raft: %s: the record exceeds Dragonboat's entry size limit", core.ErrTooLarge, op)
	}
	return fmt.Errorf("%w: raft: %s: %v", core.ErrUnavailable, op, err)
}

// retryable reports whether a proposal failed before entering the log.
func retryable(err error) bool {
	return errors.Is(err, dragonboat.ErrShardNotReady) || errors.Is(err, dragonboat.ErrSystemBusy) ||
		errors.Is(err, dragonboat.ErrShardNotInitialized)
}

// propose appends cmd and waits until it is applied on this member. A
// proposal that cannot commit within ProposalTimeout fails with
// ErrUnavailable (its outcome unknown), and so does one whose member closes
// under it; ErrClosed only when the member was closed before.
func (m *member) propose(ctx context.Context, cmd *raftv1.Command) (*raftv1.CommandResult, error) {
	if cmd.TimeMs == 0 {
		cmd.TimeMs = time.Now().UnixMilli()
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("raft: propose: %w", err) // before the proposal: not applied
	}
	if err := m.disk.refusal(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return nil, errClosed // before the proposal: not applied
	}
	data := fsm.MustMarshal(cmd)
	m.proposing.Add(1)
	defer m.proposing.Add(-1)
	pctx, cancel := proposalCtx(ctx, m.opts.ProposalTimeout)
	defer cancel()
	if err := m.awaitReady(ctx, pctx); err != nil {
		return nil, err
	}
	var wait *retry.Backoff // made at the first retry: most proposals need none
	for {
		res, err := m.nh.SyncPropose(pctx, m.noop, data)
		if err == nil {
			var r raftv1.CommandResult
			if err := protocodec.Unmarshal(res.Data, &r); err != nil {
				return nil, fmt.Errorf("%w: raft: undecodable result: %v", core.ErrUnavailable, err)
			}
			return &r, nil
		}
		if retryable(err) && pctx.Err() == nil {
			if wait == nil {
				wait = retry.New(5*time.Millisecond, 100*time.Millisecond)
			}
			retry.Sleep(pctx, wait.Next())
			continue
		}
		m.proposalsFailed.Add(1)
		err = m.mapErr(ctx, "propose", err)
		if errors.Is(err, core.ErrClosed) {
			// Closed while the proposal was in flight: it may commit.
			return nil, fmt.Errorf("%w: raft: the backend closed while the write was in flight: its outcome is unknown", core.ErrUnavailable)
		}
		return nil, err
	}
}

// awaitReady holds the member's first proposal until the cluster has a
// leader that has committed an entry of its term and this member has
// applied it: a linearizable read (ReadIndex) succeeds only then, and is
// safe to repeat. A fresh cluster (or one electing under load) otherwise
// takes the first proposals while the leadership still moves: a proposal a
// follower forwards to a leader that loses its term before replicating it
// is neither committed nor reported dropped by Dragonboat, and its caller
// waits out the whole proposal timeout for an outcome it then does not
// know. After the first success it costs nothing. An error means nothing
// was proposed; pctx bounds the wait (the proposal's timeout within the
// caller's ctx).
func (m *member) awaitReady(ctx, pctx context.Context) error {
	if m.ready.Load() {
		return nil
	}
	if _, err := m.read(pctx, fsm.AppliedQuery{}, false); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("raft: propose: %w", ctx.Err())
		}
		if errors.Is(err, core.ErrClosed) {
			return err
		}
		return fmt.Errorf("%w: raft: propose: this member has seen no leader commit an entry of its term yet (%v); the write was not proposed", core.ErrUnavailable, err)
	}
	m.ready.Store(true)
	return nil
}

// proposeBestEffort is propose for records that may be dropped (a
// resignation, a closing client's session expiry): it gives up with
// ErrUnavailable as soon as this member knows no Raft leader, since the
// proposal then cannot commit before a new leader is elected (Dragonboat
// does not fail it early), and waiting would only hold up the caller,
// typically a shutdown.
// proposalCtx bounds a proposal by timeout: ctx itself when its own
// deadline comes first (a caller's deadline, as on every call through the
// plugin), so that a write does not pay for a second timer and cancel
// context it cannot need; otherwise ctx with that timeout.
func proposalCtx(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, timeout)
}

func (m *member) proposeBestEffort(ctx context.Context, cmd *raftv1.Command) (*raftv1.CommandResult, error) {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	var leaderless atomic.Bool
	go func() {
		for {
			m.mu.Lock()
			none, ch := m.raftLeader == 0 && !m.closed, m.changeC
			m.mu.Unlock()
			if none {
				leaderless.Store(true)
				cancel()
				return
			}
			select {
			case <-ch:
			case <-done:
				return
			}
		}
	}()
	res, err := m.propose(pctx, cmd)
	if err != nil && ctx.Err() == nil && leaderless.Load() {
		return nil, fmt.Errorf("%w: raft: no Raft leader; the record was not committed", core.ErrUnavailable)
	}
	return res, err
}

// read runs a query: linearizable (ReadIndex, on any member) or stale.
func (m *member) read(ctx context.Context, q interface{}, stale bool) (interface{}, error) {
	// An ended context fails before any work: Dragonboat's SyncRead picks
	// at random between a ready answer and a done context.
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("raft: read: %w", err)
	}
	if err := m.disk.refusal(); err != nil {
		return nil, err
	}
	if stale {
		v, err := m.nh.StaleRead(shardID, q)
		if err != nil {
			return nil, m.mapErr(ctx, "read", err)
		}
		return v, nil
	}
	rctx, cancel := context.WithTimeout(ctx, m.opts.ProposalTimeout)
	defer cancel()
	var wait *retry.Backoff // made at the first retry: most reads need none
	// A ReadIndex request a follower forwards to the leader is not
	// retransmitted when the message is lost (as happens while a restarted
	// member's connections are being set up): one attempt would wait out
	// the whole timeout. Reads are idempotent, so each attempt is bounded
	// (one election timeout, doubling, so that a member with a long apply
	// backlog still gets there) and a timed-out attempt is retried.
	attempt := m.opts.ElectionTimeout
	for {
		actx, acancel := context.WithTimeout(rctx, attempt)
		v, err := m.nh.SyncRead(actx, shardID, q)
		acancel()
		if err == nil {
			return v, nil
		}
		// Dragonboat may report the attempt's timeout a little before its
		// context expires. Retry only while a useful remainder is left
		// (below a few ticks Dragonboat refuses the timeout as too small).
		if errors.Is(err, dragonboat.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
			if dl, ok := rctx.Deadline(); ok && time.Until(dl) > 4*TickInterval && rctx.Err() == nil {
				attempt *= 2
				continue
			}
		}
		if retryable(err) && rctx.Err() == nil {
			if wait == nil {
				wait = retry.New(5*time.Millisecond, 100*time.Millisecond)
			}
			retry.Sleep(rctx, wait.Next())
			continue
		}
		return nil, m.mapErr(ctx, "read", err)
	}
}

// waitApplied returns a channel closed after the next applied batch and the
// applied index now.
func (m *member) waitApplied() (<-chan struct{}, uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.applyC, m.applied
}

func (m *member) close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	close(m.stop)
	if m.holder != nil {
		m.dropHolderLocked()
	}
	m.broadcastChangeLocked()
	m.mu.Unlock()
	m.disk.closeNodeHost()
	m.wg.Wait()
}
