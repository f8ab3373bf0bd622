package memory

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/fanout"
)

var (
	_ core.MetadataBackend = (*Backend)(nil)
	_ core.LeaseManager    = (*Backend)(nil)
	_ core.FaultInjector   = (*Backend)(nil)
	_ core.SessionExpirer  = (*Backend)(nil)
)

// Backend is one client of a Store, with a session of its own. It
// implements core.MetadataBackend, core.LeaseManager, core.FaultInjector
// and core.SessionExpirer. Every method is safe for concurrent use.
type Backend struct {
	s       *Store
	name    string
	timeout time.Duration

	// The hubs are safe on their own; the store publishes to them and
	// subscribes with an initial value under s.mu, so that a new
	// subscriber's first value and later ones are in order.
	events  fanout.Hub[core.SessionEvent]
	leaders fanout.Hub[core.LeaderInfo]

	// All fields below are guarded by s.mu.
	sess     *session
	closed   bool
	done     chan struct{} // closed by Close
	paused   bool
	failNext error
	latency  time.Duration
}

// sessionEventBuffer is how many session events a slow subscriber may have
// undelivered before the oldest is dropped.
const sessionEventBuffer = 16

// NewClient opens a client of the store with a new session. opts.Name labels
// it in Status; opts.SessionTimeout (0: the store's default) is its session
// timeout. The client renews its session from a background ticker until it
// is closed (see PauseHeartbeats). On a closed store the client is closed
// from the start: every call fails with core.ErrClosed.
func (s *Store) NewClient(opts core.ClientOptions) *Backend {
	timeout := opts.SessionTimeout
	if timeout <= 0 {
		timeout = s.opts.SessionTimeout
	}
	b := &Backend{
		s:       s,
		name:    opts.Name,
		timeout: timeout,
		done:    make(chan struct{}),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		b.closed = true
		close(b.done)
		b.events.Close()
		b.leaders.Close()
		return b
	}
	s.clients[b] = struct{}{}
	b.newSessionLocked()
	s.kickReaper()
	s.wg.Add(1)
	go b.heartbeat()
	return b
}

func (b *Backend) newSessionLocked() {
	s := b.s
	se := &session{id: s.newIDLocked(), timeout: b.timeout, deadline: s.opts.Now().Add(b.timeout), client: b}
	s.sessions[se.id] = se
	b.sess = se
}

// heartbeat renews the client's session every third of its timeout.
func (b *Backend) heartbeat() {
	defer b.s.wg.Done()
	period := b.timeout / 3
	if period < time.Millisecond {
		period = time.Millisecond
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-b.done:
			return
		case <-t.C:
		}
		b.s.mu.Lock()
		if !b.closed && !b.paused && b.sess != nil {
			b.sess.deadline = b.s.opts.Now().Add(b.timeout)
		}
		b.s.mu.Unlock()
	}
}

// PauseHeartbeats stops the client from renewing its session, so that the
// session really expires after its timeout (and so does each new session
// established after an expiry, until ResumeHeartbeats). It is a test hook.
func (b *Backend) PauseHeartbeats() {
	b.s.mu.Lock()
	b.paused = true
	b.s.mu.Unlock()
}

// ResumeHeartbeats undoes PauseHeartbeats and renews the session now.
func (b *Backend) ResumeHeartbeats() {
	b.s.mu.Lock()
	b.paused = false
	if b.sess != nil && !b.closed {
		b.sess.deadline = b.s.opts.Now().Add(b.timeout)
	}
	b.s.mu.Unlock()
}

// Store returns the store the client belongs to.
func (b *Backend) Store() *Store { return b.s }

// begin starts a call: it checks ctx and the client, then waits the
// injected latency.
func (b *Backend) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.s.mu.Lock()
	closed, lat := b.closed, b.latency
	b.s.mu.Unlock()
	if closed {
		return core.ErrClosed
	}
	if lat > 0 {
		t := time.NewTimer(lat)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// lock takes the store lock for a call and fails with ErrClosed when the
// client is closed.
func (b *Backend) lock() error {
	b.s.mu.Lock()
	if b.closed {
		b.s.mu.Unlock()
		return core.ErrClosed
	}
	return nil
}

// GetMany reads many paths at one revision. Stale reads are served the same
// way as linearizable ones. Errors: as core.Reader.
func (b *Backend) GetMany(ctx context.Context, paths []string, opts core.ReadOptions) ([]core.GetResult, error) {
	if err := b.begin(ctx); err != nil {
		return nil, err
	}
	if err := b.lock(); err != nil {
		return nil, err
	}
	defer b.s.mu.Unlock()
	out := make([]core.GetResult, len(paths))
	for i, p := range paths {
		if err := core.ValidatePath(p); err != nil {
			out[i].Err = err
			continue
		}
		n := b.s.nodes[p]
		if n == nil {
			out[i].Err = fmt.Errorf("%w: %s", core.ErrNotFound, p)
			continue
		}
		out[i].Node = core.Node{Path: p, Stat: b.s.statLocked(p, n)}
		if !opts.NoData {
			out[i].Node.Data = cloneBytes(n.data)
		}
	}
	return out, nil
}

// Children returns path's sorted child names and its stat. Errors: as
// core.Reader.
func (b *Backend) Children(ctx context.Context, path string, opts core.ReadOptions) ([]string, core.Stat, error) {
	if err := b.begin(ctx); err != nil {
		return nil, core.Stat{}, err
	}
	if err := core.ValidatePath(path); err != nil {
		return nil, core.Stat{}, err
	}
	if err := b.lock(); err != nil {
		return nil, core.Stat{}, err
	}
	defer b.s.mu.Unlock()
	n := b.s.nodes[path]
	if n == nil {
		return nil, core.Stat{}, fmt.Errorf("%w: %s", core.ErrNotFound, path)
	}
	return b.s.childNamesLocked(path), b.s.statLocked(path, n), nil
}

// Snapshot reads every node at or below prefix at the current revision,
// sorted by path. Errors: as core.Reader.
func (b *Backend) Snapshot(ctx context.Context, prefix string) (core.Snapshot, error) {
	if err := b.begin(ctx); err != nil {
		return core.Snapshot{}, err
	}
	if err := core.ValidatePath(prefix); err != nil {
		return core.Snapshot{}, err
	}
	if err := b.lock(); err != nil {
		return core.Snapshot{}, err
	}
	defer b.s.mu.Unlock()
	snap := core.Snapshot{Revision: b.s.rev}
	for p, n := range b.s.nodes {
		if core.HasPrefixPath(p, prefix) {
			snap.Nodes = append(snap.Nodes, core.Node{Path: p, Data: cloneBytes(n.data), Stat: b.s.statLocked(p, n)})
		}
	}
	sortNodes(snap.Nodes)
	return snap, nil
}

// StreamSnapshot is Snapshot in pages (core.SnapshotStreamer): the store
// copies the nodes at one revision under its lock, then hands them out a
// page at a time, unlocked. (Being in memory, it holds the copy; a
// backend on disk reads the pages from a snapshot of its store.)
func (b *Backend) StreamSnapshot(ctx context.Context, prefix string, pageBytes int, fn func(rev int64, nodes []core.Node) error) error {
	snap, err := b.Snapshot(ctx, prefix)
	if err != nil {
		return err
	}
	if pageBytes <= 0 {
		pageBytes = core.DefaultSnapshotPageBytes
	}
	return core.PageNodes(snap.Nodes, pageBytes, func(nodes []core.Node) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return fn(snap.Revision, nodes)
	})
}

// sortNodes sorts nodes by path, as plain strings.
func sortNodes(ns []core.Node) {
	sort.Slice(ns, func(i, j int) bool { return ns[i].Path < ns[j].Path })
}

// Txn applies ops atomically. Errors: as core.Writer; ErrFenced when
// opts.Fence is valid but not the current leadership's. A write injected
// with FailNextWrite fails with that error and changes nothing.
func (b *Backend) Txn(ctx context.Context, ops []core.Op, opts core.TxnOptions) (core.TxnResult, error) {
	if err := b.begin(ctx); err != nil {
		return core.TxnResult{}, err
	}
	if err := b.lock(); err != nil {
		return core.TxnResult{}, err
	}
	defer b.s.mu.Unlock()
	if err := b.failNext; err != nil {
		b.failNext = nil
		return core.TxnResult{}, err
	}
	if !b.s.fenceCurrentLocked(opts.Fence) {
		return core.TxnResult{}, fmt.Errorf("%w: fence epoch %d, current epoch %d", core.ErrFenced, opts.Fence.Epoch, b.s.currentEpochLocked())
	}
	return b.s.txnLocked(ops, b.sess.id)
}

// Status reports the store's revision and leader; Role is always
// standalone and Epoch is the latest leader epoch handed out (-1 before the
// first leader). It never blocks for long. Errors: ErrClosed, context
// errors.
func (b *Backend) Status(ctx context.Context) (core.Status, error) {
	if err := b.begin(ctx); err != nil {
		return core.Status{}, err
	}
	if err := b.lock(); err != nil {
		return core.Status{}, err
	}
	defer b.s.mu.Unlock()
	s := b.s
	st := core.Status{
		Backend:      "memory",
		MemberID:     b.name,
		Role:         core.RoleStandalone,
		Epoch:        s.epoch,
		CommitIndex:  s.rev,
		AppliedIndex: s.rev,
		Revision:     s.rev,
		Details: map[string]string{
			"sessions":           fmt.Sprint(len(s.sessions)),
			"leases":             fmt.Sprint(len(s.leases)),
			"nodes":              fmt.Sprint(len(s.nodes)),
			"compacted_revision": fmt.Sprint(s.compacted),
			"session_id":         fmt.Sprint(b.sess.id),
		},
	}
	if s.leader != nil {
		st.LeaderID = s.leader.cand.ID
		st.LeaderAddress = s.leader.cand.Address
	}
	return st, nil
}

// Capabilities reports exact history, stale reads, leases, fault
// injection, session expiry on demand, streamed snapshots, tablet servers through the
// coordinator (as on Raft) and the store's value size limit.
func (b *Backend) Capabilities() core.Capabilities {
	return core.Capabilities{
		Name:         "memory",
		ExactHistory: true,
		StaleReads:   true,
		// One store serves every client: a read started after a write
		// returned sees it, through any client.
		LinearizableFollowerReads: true,
		Leases:                    true,
		FaultInjection:            true,
		SessionExpiry:             true,
		Import:                    true,
		TabletServers:             core.TabletServersThroughCoordinator,
		MaxValueSize:              b.s.opts.MaxValueSize,

		ImportKeepsVersions: true,
		StreamedSnapshots:   true,
	}
}

// Session returns the client's current session.
func (b *Backend) Session() core.SessionInfo {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if b.closed {
		id := int64(0)
		if b.sess != nil {
			id = b.sess.id
		}
		return core.SessionInfo{ID: id, Timeout: b.timeout, State: core.SessionClosed}
	}
	return core.SessionInfo{ID: b.sess.id, Timeout: b.timeout, State: core.SessionConnected}
}

// SessionEvents returns the client's session events from the next one on.
// The channel holds up to 16 undelivered events; beyond that the oldest is
// dropped. It is closed when ctx ends or the client closes. Errors:
// ErrClosed, context errors.
func (b *Backend) SessionEvents(ctx context.Context) (<-chan core.SessionEvent, error) {
	if err := b.begin(ctx); err != nil {
		return nil, err
	}
	if err := b.lock(); err != nil {
		return nil, err
	}
	defer b.s.mu.Unlock()
	return b.events.Subscribe(ctx, sessionEventBuffer), nil
}

// emitLocked delivers a session event to every subscriber (see
// internal/fanout: a slow subscriber loses its oldest undelivered event).
func (b *Backend) emitLocked(ev core.SessionEvent) {
	b.events.Publish(ev)
}

// ExpireSession expires the client's session now, as its timeout would:
// its ephemerals are deleted in one revision, its leadership and
// candidacies end, SessionExpired is delivered, then a new session is
// established and SessionConnected delivered. Errors: ErrClosed, context
// errors.
func (b *Backend) ExpireSession(ctx context.Context) error {
	if err := b.begin(ctx); err != nil {
		return err
	}
	if err := b.lock(); err != nil {
		return err
	}
	defer b.s.mu.Unlock()
	b.s.expireSessionLocked(b.sess)
	return nil
}

// ExpireSession expires the session with the given id (see
// Backend.ExpireSession). It reports whether such a session existed.
func (s *Store) ExpireSession(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.sessions[id]
	if se == nil {
		return false
	}
	s.expireSessionLocked(se)
	return true
}

func (s *Store) expireSessionLocked(se *session) {
	if s.sessions[se.id] != se {
		return
	}
	delete(s.sessions, se.id)
	s.deleteOwnedLocked(se.id)
	s.dropSessionCandidaciesLocked(se.id, fmt.Errorf("%w: session %#x expired while campaigning", core.ErrSessionExpired, se.id))
	b := se.client
	if b.closed || b.sess != se {
		return
	}
	b.emitLocked(core.SessionEvent{State: core.SessionExpired, SessionID: se.id})
	b.newSessionLocked()
	b.emitLocked(core.SessionEvent{State: core.SessionConnected, SessionID: b.sess.id})
	s.kickReaper()
}

// FailNextWrite makes this client's next Txn fail with err before changing
// anything. A nil err clears it.
func (b *Backend) FailNextWrite(err error) {
	b.s.mu.Lock()
	b.failNext = err
	b.s.mu.Unlock()
}

// SetLatency adds d before every call of this client that takes a
// context; 0 removes it. Cancelling the call's context ends the wait.
func (b *Backend) SetLatency(d time.Duration) {
	b.s.mu.Lock()
	b.latency = d
	b.s.mu.Unlock()
}

// Close ends the client's session: its ephemerals are deleted in one
// revision, its leadership and candidacies end, SessionClosed is delivered
// and every watch, session-event and leader channel is closed. Later calls
// fail with ErrClosed. Idempotent.
func (b *Backend) Close() error {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	se := b.sess
	if s.sessions[se.id] == se {
		delete(s.sessions, se.id)
		s.deleteOwnedLocked(se.id)
	}
	s.dropClientCandidaciesLocked(b, fmt.Errorf("%w: client closed while campaigning", core.ErrClosed))
	b.events.CloseWith(core.SessionEvent{State: core.SessionClosed, SessionID: se.id})
	b.leaders.Close()
	delete(s.clients, b)
	close(b.done)
	return nil
}
