package raft

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaplane/metaplane/backends/raft/fsm"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/fanout"
	"github.com/metaplane/metaplane/internal/retry"
	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
)

// Client is one client of a Raft member: a core.MetadataBackend with a
// session of its own (a replicated lease). It also implements
// core.LeaseManager, core.IDAllocator, core.MembershipManager and
// core.SessionExpirer, and serves the metadata stream (FetchMetadata,
// FetchMetadataSnapshot).
//
// Writes, lease grants and revocations may be made on any member: a
// follower forwards the proposal to the Raft leader, and fences are checked
// when the entry is applied. Membership changes need the leader and fail
// with *core.NotLeaderError on a follower.
//
// Every method is safe for concurrent use.
type Client struct {
	m       *member
	name    string
	timeout time.Duration

	mu       sync.Mutex
	closed   bool
	session  int64
	state    core.SessionState
	lead     *leadership
	expiredC chan int64
	stop     chan struct{}
	wg       sync.WaitGroup
	// silenced, a test hook (the conformance harness's Silence), stops
	// the renewals, as if the client had crashed: its session then
	// expires by its timeout, and so does each one granted after.
	silenced atomic.Bool

	// events fans the session events out; leaders the coordinator leader,
	// published by the member under m.mu on every change (see
	// member.publishLeaderLocked).
	events  fanout.Hub[core.SessionEvent]
	leaders fanout.Hub[core.LeaderInfo]
}

var (
	_ core.MetadataBackend   = (*Client)(nil)
	_ core.LeaseManager      = (*Client)(nil)
	_ core.IDAllocator       = (*Client)(nil)
	_ core.MembershipManager = (*Client)(nil)
	_ core.SessionExpirer    = (*Client)(nil)
)

// sessionEventBuffer is how many session events a slow subscriber may have
// undelivered before the oldest is dropped.
const sessionEventBuffer = 16

// newClient opens a client and grants its session.
func newClient(ctx context.Context, m *member, opts core.ClientOptions) (*Client, error) {
	timeout := opts.SessionTimeout
	if timeout <= 0 {
		timeout = m.opts.SessionTimeout
	}
	c := &Client{m: m, name: opts.Name, timeout: timeout,
		expiredC: make(chan int64, 4), stop: make(chan struct{})}
	id, err := c.grant(ctx)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, errClosed
	}
	m.clients[c] = struct{}{}
	m.mu.Unlock()
	c.setSession(id)
	c.wg.Add(1)
	go c.sessionLoop()
	return c, nil
}

func (c *Client) grant(ctx context.Context) (int64, error) {
	owner := c.name
	if owner == "" {
		owner = "client"
	}
	res, err := c.m.propose(ctx, &raftv1.Command{Body: &raftv1.Command_SessionGrant{SessionGrant: &raftv1.SessionGrant{
		Owner: owner, TtlMs: c.timeout.Milliseconds()}}})
	if err != nil {
		return 0, err
	}
	if err := fsm.CodeError(res); err != nil {
		return 0, err
	}
	return res.GetValue(), nil
}

// setSession makes id the client's session and reports Connected.
func (c *Client) setSession(id int64) {
	c.m.mu.Lock()
	c.m.expiredFns[id] = func() {
		select {
		case c.expiredC <- id:
		default:
		}
	}
	c.m.mu.Unlock()
	c.mu.Lock()
	c.session, c.state = id, core.SessionConnected
	c.mu.Unlock()
	c.emit(core.SessionEvent{State: core.SessionConnected, SessionID: id})
}

// emit delivers a session event to every subscriber; a slow one loses its
// oldest undelivered event, never the latest.
func (c *Client) emit(ev core.SessionEvent) {
	c.events.Publish(ev)
}

// sessionLoop renews the session (in memory on the leader, by a replicated
// renewal record on a follower) and replaces it when it expires.
func (c *Client) sessionLoop() {
	defer c.wg.Done()
	every := c.timeout / 3
	if every < TickInterval {
		every = TickInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	// A member that joined and is not yet promoted reports its progress
	// (with the renewal) every joinReportEvery, so that AddVoter, which
	// waits for a report made after it added the member, sees it catch up
	// at once rather than at the next renewal. Once it is a voter (it
	// never goes back) the faster ticker stops.
	var join <-chan time.Time
	if every > joinReportEvery && c.m.nonVoting() {
		j := time.NewTicker(joinReportEvery)
		defer j.Stop()
		join = j.C
	}
	for {
		select {
		case <-c.stop:
			return
		case id := <-c.expiredC:
			c.handleExpired(id)
		case <-t.C:
			c.renew()
		case <-join:
			if !c.m.nonVoting() {
				join = nil
				continue
			}
			c.renew()
		}
	}
}

// joinReportEvery is how often a joined member not yet promoted renews its
// session, its progress report.
const joinReportEvery = 500 * time.Millisecond

func (c *Client) renew() {
	if c.silenced.Load() {
		return
	}
	c.mu.Lock()
	id, state := c.session, c.state
	c.mu.Unlock()
	if c.m.isLeader() && c.m.touch(id) {
		if state == core.SessionSuspended {
			c.setState(id, core.SessionConnected)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout/3+time.Second)
	defer cancel()
	go func() {
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	_, applied := c.m.waitApplied()
	res, err := c.m.propose(ctx, &raftv1.Command{Body: &raftv1.Command_SessionRenew{SessionRenew: &raftv1.SessionRenew{
		Id: id, ReplicaId: c.m.replicaID, AppliedIndex: applied}}})
	switch {
	case err != nil:
		if state == core.SessionConnected && !errors.Is(err, core.ErrClosed) {
			c.setState(id, core.SessionSuspended)
		}
	case res.GetCode() == raftv1.Code_CODE_SESSION_EXPIRED:
		c.handleExpired(id)
	default:
		if state == core.SessionSuspended {
			c.setState(id, core.SessionConnected)
		}
	}
}

func (c *Client) setState(id int64, st core.SessionState) {
	c.mu.Lock()
	if c.session != id || c.closed {
		c.mu.Unlock()
		return
	}
	c.state = st
	c.mu.Unlock()
	c.emit(core.SessionEvent{State: st, SessionID: id})
}

// handleExpired reports the expiry of session id and establishes a new
// session.
func (c *Client) handleExpired(id int64) {
	c.mu.Lock()
	if c.session != id || c.closed {
		c.mu.Unlock()
		return
	}
	c.state = core.SessionExpired
	l := c.lead
	c.mu.Unlock()
	c.m.mu.Lock()
	delete(c.m.expiredFns, id)
	c.m.mu.Unlock()
	if l != nil {
		l.lose()
	}
	c.emit(core.SessionEvent{State: core.SessionExpired, SessionID: id})
	wait := retry.New(10*time.Millisecond, time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), c.m.opts.ProposalTimeout)
		go func() {
			select {
			case <-c.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		nid, err := c.grant(ctx)
		cancel()
		if err == nil {
			c.setSession(nid)
			return
		}
		if !retry.Sleep(context.Background(), wait.Next(), c.stop) {
			return
		}
	}
}

func (c *Client) check() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errClosed
	}
	return nil
}

// ---- reads ----

// GetMany reads many paths at one applied index. Linearizable (ReadIndex,
// on followers too) unless opts.Stale. Errors: as core.Reader.
func (c *Client) GetMany(ctx context.Context, paths []string, opts core.ReadOptions) ([]core.GetResult, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	v, err := c.m.read(ctx, fsm.GetManyQuery{Paths: append([]string(nil), paths...), NoData: opts.NoData}, opts.Stale)
	if err != nil {
		return nil, err
	}
	return v.(*fsm.GetManyAnswer).Results, nil
}

// Children returns path's sorted child names and its stat. Errors: as
// core.Reader.
func (c *Client) Children(ctx context.Context, path string, opts core.ReadOptions) ([]string, core.Stat, error) {
	if err := c.check(); err != nil {
		return nil, core.Stat{}, err
	}
	if err := core.ValidatePath(path); err != nil {
		return nil, core.Stat{}, err
	}
	v, err := c.m.read(ctx, fsm.ChildrenQuery{Path: path}, opts.Stale)
	if err != nil {
		return nil, core.Stat{}, err
	}
	a := v.(*fsm.ChildrenAnswer)
	return a.Names, a.Stat, a.Err
}

// Snapshot reads every node at or below prefix at one applied index
// (linearizable). Errors: as core.Reader.
func (c *Client) Snapshot(ctx context.Context, prefix string) (core.Snapshot, error) {
	if err := c.check(); err != nil {
		return core.Snapshot{}, err
	}
	if err := core.ValidatePath(prefix); err != nil {
		return core.Snapshot{}, err
	}
	v, err := c.m.read(ctx, fsm.SnapshotQuery{Prefix: prefix}, false)
	if err != nil {
		return core.Snapshot{}, err
	}
	return v.(core.Snapshot), nil
}

// ---- writes ----

// Txn appends the transaction and waits until it is applied on this
// member. Errors: as core.Writer; a fence older than the last applied
// leader record gives ErrFenced; a write that cannot commit (no quorum)
// gives ErrUnavailable after the proposal timeout, its outcome unknown.
func (c *Client) Txn(ctx context.Context, ops []core.Op, opts core.TxnOptions) (core.TxnResult, error) {
	if err := c.check(); err != nil {
		return core.TxnResult{}, err
	}
	if len(ops) == 0 {
		return core.TxnResult{}, fmt.Errorf("%w: empty transaction", core.ErrInvalidArgument)
	}
	x := &raftv1.Txn{Fence: fenceProto(opts.Fence)}
	for i, op := range ops {
		if err := validateOp(op); err != nil {
			return core.TxnResult{}, &core.TxnError{Index: i, Err: err}
		}
		x.Ops = append(x.Ops, &raftv1.Op{Type: int32(op.Type), Path: op.Path, Data: op.Data, Version: op.Version,
			Mode: int32(op.Mode), MakeParents: op.MakeParents, Lease: op.Lease})
	}
	c.mu.Lock()
	x.Session = c.session
	c.mu.Unlock()
	res, err := c.m.propose(ctx, &raftv1.Command{Body: &raftv1.Command_Txn{Txn: x}})
	if err != nil {
		return core.TxnResult{}, err
	}
	if err := fsm.CodeError(res); err != nil {
		return core.TxnResult{}, err
	}
	out := core.TxnResult{Revision: res.GetIndex(), Results: make([]core.OpResult, len(res.GetResults()))}
	for i, r := range res.GetResults() {
		out.Results[i] = core.OpResult{Type: core.OpType(r.GetType()), Path: r.GetPath(), Stat: fsm.CoreStat(r.GetStat())}
	}
	return out, nil
}

func validateOp(op core.Op) error {
	if err := core.ValidatePath(op.Path); err != nil {
		return err
	}
	switch op.Type {
	case core.OpCheck, core.OpSet, core.OpDelete:
	case core.OpCreate:
		if !op.Mode.Valid() {
			return fmt.Errorf("%w: create %s: unknown mode %d", core.ErrInvalidArgument, op.Path, op.Mode)
		}
	default:
		return fmt.Errorf("%w: unknown op type %d", core.ErrInvalidArgument, op.Type)
	}
	if len(op.Data) > core.DefaultMaxValueSize {
		return fmt.Errorf("%w: %s: %d bytes, the limit is %d", core.ErrTooLarge, op.Path, len(op.Data), core.DefaultMaxValueSize)
	}
	return nil
}

func fenceProto(f core.Fence) *raftv1.Fence {
	if !f.Valid {
		return nil
	}
	return &raftv1.Fence{Epoch: f.Epoch, Token: f.Token, Valid: true}
}

// AllocateIDs reserves [first, first+n) from the counter at path with one
// replicated record. Errors: as core.IDAllocator.
func (c *Client) AllocateIDs(ctx context.Context, path string, n int64, fence core.Fence) (int64, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	if n < 1 {
		return 0, fmt.Errorf("%w: allocate %d ids from %s: count must be at least 1", core.ErrInvalidArgument, n, path)
	}
	if err := core.ValidatePath(path); err != nil {
		return 0, err
	}
	res, err := c.m.propose(ctx, &raftv1.Command{Body: &raftv1.Command_IdReserve{IdReserve: &raftv1.IDBlockReserve{
		Path: path, N: n, Fence: fenceProto(fence)}}})
	if err != nil {
		return 0, err
	}
	if err := fsm.CodeError(res); err != nil {
		return 0, err
	}
	return res.GetValue(), nil
}

// ---- watches and the metadata stream ----

// watchBatch is the most events one watch read takes from the change log.
const watchBatch = 1024

// Watch delivers the changes at or below prefix from fromRevision (a Raft
// log index; 0: from the next change) in order, exactly once, from this
// member's change log. A revision older than the retained history fails at
// once with ErrCompacted; a consumer that falls behind the retention gets a
// final ErrCompacted response. Errors: ErrInvalidPath, ErrCompacted,
// ErrClosed.
func (c *Client) Watch(ctx context.Context, prefix string, fromRevision int64) (<-chan core.WatchResponse, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if err := core.ValidatePath(prefix); err != nil {
		return nil, err
	}
	if fromRevision < 0 {
		return nil, fmt.Errorf("%w: watch from revision %d", core.ErrInvalidArgument, fromRevision)
	}
	next := fromRevision
	if next == 0 {
		// The next change after a linearizable point: a write that
		// completed before Watch was called is not delivered.
		v, err := c.m.read(ctx, fsm.AppliedQuery{}, false)
		if err != nil {
			return nil, err
		}
		next = v.(int64) + 1
	} else {
		v, err := c.m.read(ctx, fsm.ChangesQuery{From: next, Prefix: prefix, Max: 1}, true)
		if err != nil {
			return nil, err
		}
		if a := v.(*fsm.ChangesAnswer); next < a.Floor {
			return nil, fmt.Errorf("%w: revision %d is older than the oldest kept (%d)", core.ErrCompacted, next, a.Floor)
		}
	}
	ch := make(chan core.WatchResponse, 16)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(ch)
		for {
			wait, _ := c.m.waitApplied()
			v, err := c.m.read(ctx, fsm.ChangesQuery{From: next, Prefix: prefix, Max: watchBatch}, true)
			var resp *core.WatchResponse
			switch {
			case err != nil:
				resp = &core.WatchResponse{Err: err, Revision: next - 1}
			default:
				a := v.(*fsm.ChangesAnswer)
				if next < a.Floor {
					resp = &core.WatchResponse{Err: fmt.Errorf("%w: the watch fell behind the retained history (oldest %d)", core.ErrCompacted, a.Floor), Revision: next - 1}
				} else {
					if len(a.Events) > 0 {
						resp = &core.WatchResponse{Events: a.Events, Revision: a.UpTo}
					}
					caughtUp := a.UpTo >= a.Applied
					next = a.UpTo + 1
					if resp == nil && !caughtUp {
						continue
					}
					if resp == nil {
						select {
						case <-wait:
							continue
						case <-ctx.Done():
							return
						case <-c.stop:
							return
						}
					}
				}
			}
			select {
			case ch <- *resp:
			case <-ctx.Done():
				return
			case <-c.stop:
				return
			}
			if resp.Err != nil {
				return
			}
		}
	}()
	return ch, nil
}

// FetchMetadata is the FETCH_METADATA long poll: the changes from
// fromRevision on (at most watchBatch events, whole log entries), waiting
// up to maxWait (capped by coordinator.metadata-stream.max-wait) for one
// to arrive. It returns the events and the revision the caller has seen
// everything up to (fetch on from rev+1). Errors: ErrCompacted (take
// FetchMetadataSnapshot), ErrClosed, context errors.
func (c *Client) FetchMetadata(ctx context.Context, fromRevision int64, maxWait time.Duration) ([]core.WatchEvent, int64, error) {
	if err := c.check(); err != nil {
		return nil, 0, err
	}
	if fromRevision < 1 {
		fromRevision = 1
	}
	if maxWait <= 0 || maxWait > c.m.opts.MetadataStreamMaxWait {
		maxWait = c.m.opts.MetadataStreamMaxWait
	}
	timer := time.NewTimer(maxWait)
	defer timer.Stop()
	for {
		wait, _ := c.m.waitApplied()
		v, err := c.m.read(ctx, fsm.ChangesQuery{From: fromRevision, Prefix: "/", Max: watchBatch}, true)
		if err != nil {
			return nil, 0, err
		}
		a := v.(*fsm.ChangesAnswer)
		if fromRevision < a.Floor {
			return nil, 0, fmt.Errorf("%w: revision %d is older than the oldest kept (%d)", core.ErrCompacted, fromRevision, a.Floor)
		}
		if len(a.Events) > 0 || a.UpTo < a.Applied {
			return a.Events, a.UpTo, nil
		}
		select {
		case <-wait:
		case <-timer.C:
			return nil, a.UpTo, nil
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-c.stop:
			return nil, 0, errClosed
		}
	}
}

// FetchMetadataSnapshot is FETCH_METADATA_SNAPSHOT: the whole tree at one
// revision (linearizable); fetch on from its Revision+1. Errors: as
// Snapshot.
func (c *Client) FetchMetadataSnapshot(ctx context.Context) (core.Snapshot, error) {
	return c.Snapshot(ctx, "/")
}

// ---- sessions ----

// Session returns the client's current session. It does not block.
func (c *Client) Session() core.SessionInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state
	if c.closed {
		st = core.SessionClosed
	}
	return core.SessionInfo{ID: c.session, Timeout: c.timeout, State: st}
}

// SessionEvents returns the client's session events from the next one on.
// A subscriber more than 16 events behind loses the oldest. The channel is
// closed when ctx ends or the client closes (after SessionClosed). Errors:
// ErrClosed.
func (c *Client) SessionEvents(ctx context.Context) (<-chan core.SessionEvent, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClosed
	}
	return c.events.Subscribe(ctx, sessionEventBuffer), nil
}

// ExpireSession expires the client's session now (a replicated expiry
// record: its ephemerals are deleted on every member) and waits until the
// client has a new session. Errors: ErrUnavailable, ErrClosed, context
// errors.
func (c *Client) ExpireSession(ctx context.Context) error {
	if err := c.check(); err != nil {
		return err
	}
	c.mu.Lock()
	id := c.session
	c.mu.Unlock()
	res, err := c.m.propose(ctx, &raftv1.Command{Body: &raftv1.Command_SessionExpire{SessionExpire: &raftv1.SessionExpire{
		Id: id, Reason: "forced"}}})
	if err != nil {
		return err
	}
	if err := fsm.CodeError(res); err != nil && !errors.Is(err, core.ErrSessionExpired) {
		return err
	}
	for {
		c.mu.Lock()
		cur, st, closed := c.session, c.state, c.closed
		c.mu.Unlock()
		if closed {
			return errClosed
		}
		if cur != id && st == core.SessionConnected {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// ---- leases ----

// GrantLease grants a replicated lease of ttl to owner (tablet-server
// registrations); any member may grant, the leader keeps its clock.
// Errors: ErrFenced, ErrInvalidArgument, ErrUnavailable, ErrClosed.
func (c *Client) GrantLease(ctx context.Context, owner string, ttl time.Duration, fence core.Fence) (int64, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	if ttl < time.Millisecond {
		return 0, fmt.Errorf("%w: lease ttl %v: must be at least 1ms", core.ErrInvalidArgument, ttl)
	}
	res, err := c.m.propose(ctx, &raftv1.Command{Body: &raftv1.Command_SessionGrant{SessionGrant: &raftv1.SessionGrant{
		Owner: owner, TtlMs: ttl.Milliseconds(), Fence: fenceProto(fence)}}})
	if err != nil {
		return 0, err
	}
	if err := fsm.CodeError(res); err != nil {
		return 0, err
	}
	return res.GetValue(), nil
}

// RenewLease restarts the lease's clock: in memory on the leader (a new
// leader restarts every clock anyway), by a replicated renewal record on a
// follower. Errors: ErrSessionExpired, ErrUnavailable, ErrClosed.
func (c *Client) RenewLease(ctx context.Context, id int64) error {
	if err := c.check(); err != nil {
		return err
	}
	if c.m.isLeader() && c.m.touch(id) {
		return nil
	}
	res, err := c.m.propose(ctx, &raftv1.Command{Body: &raftv1.Command_SessionRenew{SessionRenew: &raftv1.SessionRenew{Id: id}}})
	if err != nil {
		return err
	}
	return fsm.CodeError(res)
}

// RevokeLease ends the lease now with a replicated expiry record, deleting
// its ephemerals. Errors: ErrSessionExpired, ErrFenced, ErrUnavailable,
// ErrClosed.
func (c *Client) RevokeLease(ctx context.Context, id int64, fence core.Fence) error {
	if err := c.check(); err != nil {
		return err
	}
	res, err := c.m.propose(ctx, &raftv1.Command{Body: &raftv1.Command_SessionExpire{SessionExpire: &raftv1.SessionExpire{
		Id: id, Fence: fenceProto(fence), Reason: "revoked"}}})
	if err != nil {
		return err
	}
	return fsm.CodeError(res)
}

// ---- membership: see membership.go ----

// ---- status ----

// Capabilities returns what the Raft backend supports.
func (c *Client) Capabilities() core.Capabilities {
	return Capabilities()
}

// Capabilities is the Raft backend's capability set.
func Capabilities() core.Capabilities {
	return core.Capabilities{
		Name: "raft", ExactHistory: true, LinearizableFollowerReads: true, StaleReads: true,
		Leases: true, NativeIDAllocation: true, Membership: true, SessionExpiry: true, ConsensusStatus: true,
		Import: true, ImportKeepsVersions: true, LeadershipTransfer: true, StreamedSnapshots: true,
		TabletServers: core.TabletServersThroughCoordinator,
		MaxValueSize:  core.DefaultMaxValueSize, SelectorKey: "coordinator.seed.nodes",
	}
}

// Status returns this member's view: role, term (the epoch field), leader,
// commit and applied index, voters. Errors: ErrClosed.
func (c *Client) Status(ctx context.Context) (core.Status, error) {
	if err := c.check(); err != nil {
		return core.Status{}, err
	}
	if err := ctx.Err(); err != nil {
		return core.Status{}, fmt.Errorf("raft: status: %w", err)
	}
	return c.m.status(ctx), nil
}

// Close ends the client's session (deleting its ephemerals), resigns its
// leadership and closes its channels. Idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	id := c.session
	l := c.lead
	c.mu.Unlock()
	// Best effort, bounded: without a quorum the leader expires the session
	// by its timeout later.
	closeTimeout := c.m.opts.ProposalTimeout
	if closeTimeout > time.Second {
		closeTimeout = time.Second
	}
	if l != nil {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		_ = l.Resign(ctx)
		cancel()
	}
	c.m.mu.Lock()
	delete(c.m.expiredFns, id)
	delete(c.m.clients, c)
	mclosed := c.m.closed
	// Without a known Raft leader the expiry record cannot commit within
	// the bound: skip it (the next leader expires the session by its
	// timeout) rather than make every Close wait the bound out.
	noLeader := c.m.raftLeader == 0
	c.m.mu.Unlock()
	if !mclosed && !noLeader {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		_, _ = c.m.proposeBestEffort(ctx, &raftv1.Command{Body: &raftv1.Command_SessionExpire{SessionExpire: &raftv1.SessionExpire{
			Id: id, Reason: "closed"}}})
		cancel()
	}
	c.events.CloseWith(core.SessionEvent{State: core.SessionClosed, SessionID: id})
	c.leaders.Close()
	close(c.stop)
	c.wg.Wait()
	return nil
}
