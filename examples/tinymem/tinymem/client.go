package tinymem

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/metaplane/metaplane/core"
)

// defaultSessionTimeout is the timeout reported when the client asks for
// none. Sessions end only by Close or ExpireSession: the plugin process is
// the store, so a live client never loses contact.
const defaultSessionTimeout = 30 * time.Second

// client is one core.MetadataBackend: one session of the store.
type client struct {
	s       *store
	name    string
	timeout time.Duration
	done    chan struct{} // closed by Close: ends watches and channels

	// Guarded by s.mu.
	session int64
	closed  bool
	events  map[chan core.SessionEvent]bool
}

var (
	_ core.MetadataBackend = (*client)(nil)
	_ core.SessionExpirer  = (*client)(nil)
)

func (s *store) newClient(opts core.ClientOptions) (*client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, core.ErrClosed
	}
	timeout := opts.SessionTimeout
	if timeout <= 0 {
		timeout = defaultSessionTimeout
	}
	s.nextSession++
	c := &client{s: s, name: opts.Name, timeout: timeout, done: make(chan struct{}), session: s.nextSession, events: map[chan core.SessionEvent]bool{}}
	s.clients[c] = true
	return c, nil
}

// lock takes the store's lock for a call with ctx, or fails with the
// context's error or ErrClosed.
func (c *client) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.s.mu.Lock()
	if c.closed {
		c.s.mu.Unlock()
		return core.ErrClosed
	}
	return nil
}

func (c *client) GetMany(ctx context.Context, paths []string, opts core.ReadOptions) ([]core.GetResult, error) {
	if err := c.lock(ctx); err != nil {
		return nil, err
	}
	defer c.s.mu.Unlock()
	out := make([]core.GetResult, len(paths))
	for i, p := range paths {
		if err := core.ValidatePath(p); err != nil {
			out[i].Err = err
			continue
		}
		n := c.s.nodes[p]
		if n == nil {
			out[i].Err = fmt.Errorf("%w: %s", core.ErrNotFound, p)
			continue
		}
		out[i].Node = core.Node{Path: p, Stat: n.stat()}
		if !opts.NoData {
			out[i].Node.Data = append([]byte{}, n.data...)
		}
	}
	return out, nil
}

func (c *client) Children(ctx context.Context, path string, _ core.ReadOptions) ([]string, core.Stat, error) {
	if err := core.ValidatePath(path); err != nil {
		return nil, core.Stat{}, err
	}
	if err := c.lock(ctx); err != nil {
		return nil, core.Stat{}, err
	}
	defer c.s.mu.Unlock()
	n := c.s.nodes[path]
	if n == nil {
		return nil, core.Stat{}, fmt.Errorf("%w: %s", core.ErrNotFound, path)
	}
	names := make([]string, 0, len(n.kids))
	for k := range n.kids {
		names = append(names, k)
	}
	sort.Strings(names)
	return names, n.stat(), nil
}

func (c *client) Snapshot(ctx context.Context, prefix string) (core.Snapshot, error) {
	if err := core.ValidatePath(prefix); err != nil {
		return core.Snapshot{}, err
	}
	if err := c.lock(ctx); err != nil {
		return core.Snapshot{}, err
	}
	defer c.s.mu.Unlock()
	snap := core.Snapshot{Revision: c.s.rev}
	for p, n := range c.s.nodes {
		if under(p, prefix) {
			snap.Nodes = append(snap.Nodes, core.Node{Path: p, Data: append([]byte{}, n.data...), Stat: n.stat()})
		}
	}
	sort.Slice(snap.Nodes, func(i, j int) bool { return snap.Nodes[i].Path < snap.Nodes[j].Path })
	return snap, nil
}

func (c *client) Txn(ctx context.Context, ops []core.Op, opts core.TxnOptions) (core.TxnResult, error) {
	if err := c.lock(ctx); err != nil {
		return core.TxnResult{}, err
	}
	defer c.s.mu.Unlock()
	if f := opts.Fence; f.Valid {
		if l := c.s.leader; l == nil || l.epoch != f.Epoch {
			return core.TxnResult{}, fmt.Errorf("%w: epoch %d is not the current leadership's", core.ErrFenced, f.Epoch)
		}
	}
	return c.s.txnLocked(ops, c.session)
}

// Watch follows the history from fromRevision in a goroutine of its own:
// it reads the shared history at its own pace, so a slow consumer never
// holds up a writer; one that falls behind the kept history gets
// ErrCompacted.
func (c *client) Watch(ctx context.Context, prefix string, fromRevision int64) (<-chan core.WatchResponse, error) {
	if err := core.ValidatePath(prefix); err != nil {
		return nil, err
	}
	if err := c.lock(ctx); err != nil {
		return nil, err
	}
	next := fromRevision
	if next <= 0 {
		next = c.s.rev + 1
	} else if next <= c.s.compacted {
		c.s.mu.Unlock()
		return nil, fmt.Errorf("%w: revision %d (kept from %d)", core.ErrCompacted, fromRevision, c.s.compacted+1)
	}
	c.s.mu.Unlock()
	ch := make(chan core.WatchResponse, 16)
	go func() {
		defer close(ch)
		for {
			c.s.mu.Lock()
			if c.closed || c.s.closed {
				c.s.mu.Unlock()
				return
			}
			var batches [][]core.WatchEvent
			var resp *core.WatchResponse
			if next <= c.s.compacted {
				resp = &core.WatchResponse{Err: fmt.Errorf("%w: the watch fell behind revision %d", core.ErrCompacted, c.s.compacted+1), Revision: c.s.rev}
			} else {
				batches = c.s.eventsFromLocked(prefix, next)
				next = c.s.rev + 1
			}
			changed := c.s.changed
			c.s.mu.Unlock()
			if resp != nil {
				select {
				case ch <- *resp:
				case <-ctx.Done():
				case <-c.done:
				}
				return
			}
			for _, evs := range batches {
				select {
				case ch <- core.WatchResponse{Events: evs, Revision: evs[0].Revision}:
				case <-ctx.Done():
					return
				case <-c.done:
					return
				}
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			case <-c.done:
				return
			}
		}
	}()
	return ch, nil
}

func (c *client) Session() core.SessionInfo {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	st := core.SessionConnected
	if c.closed {
		st = core.SessionClosed
	}
	return core.SessionInfo{ID: c.session, Timeout: c.timeout, State: st}
}

// SessionEvents: each subscriber has a small buffer; when it is full the
// oldest event is dropped, so a slow consumer still gets the latest.
func (c *client) SessionEvents(ctx context.Context) (<-chan core.SessionEvent, error) {
	if err := c.lock(ctx); err != nil {
		return nil, err
	}
	ch := make(chan core.SessionEvent, 8)
	c.events[ch] = true
	c.s.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-c.done:
			return // Close closes the channel
		}
		c.s.mu.Lock()
		defer c.s.mu.Unlock()
		if c.events[ch] {
			delete(c.events, ch)
			close(ch)
		}
	}()
	return ch, nil
}

func (c *client) emitLocked(e core.SessionEvent) {
	for ch := range c.events {
		for {
			select {
			case ch <- e:
			default:
				select {
				case <-ch: // drop the oldest
				default:
				}
				continue
			}
			break
		}
	}
}

// ExpireSession ends the session as an expiry would: its ephemerals go in
// one revision, its leadership is lost, and the client carries on with a
// new session.
func (c *client) ExpireSession(ctx context.Context) error {
	if err := c.lock(ctx); err != nil {
		return err
	}
	defer c.s.mu.Unlock()
	old := c.session
	c.s.dropCandidaciesLocked(c)
	c.s.deleteEphemeralsLocked(old)
	c.emitLocked(core.SessionEvent{State: core.SessionExpired, SessionID: old})
	c.s.nextSession++
	c.session = c.s.nextSession
	c.emitLocked(core.SessionEvent{State: core.SessionConnected, SessionID: c.session})
	return nil
}

func (c *client) Status(ctx context.Context) (core.Status, error) {
	if err := c.lock(ctx); err != nil {
		return core.Status{}, err
	}
	defer c.s.mu.Unlock()
	st := core.Status{
		Backend: Descriptor.Name, MemberID: "session-" + strconv.FormatInt(c.session, 10), Role: core.RoleStandalone,
		Epoch: c.s.epoch, CommitIndex: c.s.rev, AppliedIndex: c.s.rev, Revision: c.s.rev,
		Details: map[string]string{"nodes": strconv.Itoa(len(c.s.nodes)), "bytes": strconv.FormatInt(c.s.bytes, 10),
			"candidates": strconv.Itoa(len(c.s.queue))},
	}
	if l := c.s.leader; l != nil {
		st.LeaderID, st.LeaderAddress = l.cand.ID, l.cand.Address
	}
	return st, nil
}

func (c *client) Capabilities() core.Capabilities {
	return core.Capabilities{
		Name:          Descriptor.Name,
		SelectorKey:   Descriptor.SelectorKey,
		ExactHistory:  true,
		SessionExpiry: true,
		TabletServers: Descriptor.TabletServers,
		MaxValueSize:  core.DefaultMaxValueSize,
	}
}

// Close ends the session (its ephemerals go), resigns, and closes every
// channel. Idempotent.
func (c *client) Close() error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.closed {
		return nil
	}
	c.s.dropCandidaciesLocked(c)
	c.s.deleteEphemeralsLocked(c.session)
	c.emitLocked(core.SessionEvent{State: core.SessionClosed, SessionID: c.session})
	for ch := range c.events {
		close(ch)
	}
	c.events = nil
	c.closed = true
	delete(c.s.clients, c)
	close(c.done)
	return nil
}

// candidacy is one Campaign call: waiting in the queue, then leading.
type candidacy struct {
	c       *client
	cand    core.Candidate
	epoch   int64
	elected chan struct{}
	lost    chan struct{}
	ended   chan struct{} // closed when the candidacy ends (gone)
	gone    bool
}

func (l *candidacy) Epoch() int64          { return l.epoch }
func (l *candidacy) Fence() core.Fence     { return core.Fence{Epoch: l.epoch, Valid: true} }
func (l *candidacy) Lost() <-chan struct{} { return l.lost }

func (l *candidacy) Resign(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.c.s.mu.Lock()
	defer l.c.s.mu.Unlock()
	l.c.s.withdrawLocked(l)
	return nil
}

// electLocked makes the first waiting candidate the leader when nobody
// leads, with the next epoch, and tells the observers.
func (s *store) electLocked() {
	if s.leader != nil || len(s.queue) == 0 {
		return
	}
	s.epoch++
	s.leader = s.queue[0]
	s.leader.epoch = s.epoch
	close(s.leader.elected)
	info := core.LeaderInfo{ID: s.leader.cand.ID, Address: s.leader.cand.Address, Epoch: s.epoch}
	for ch := range s.watchers {
		select {
		case <-ch: // a buffer of one: the latest leader wins
		default:
		}
		ch <- info
	}
}

// withdrawLocked ends a candidacy, waiting or leading. Idempotent.
func (s *store) withdrawLocked(l *candidacy) {
	if l.gone {
		return
	}
	l.gone = true
	close(l.ended)
	for i, q := range s.queue {
		if q == l {
			s.queue = append(s.queue[:i:i], s.queue[i+1:]...)
			break
		}
	}
	if s.leader == l {
		s.leader = nil
		close(l.lost)
		s.electLocked()
	}
}

func (s *store) dropCandidaciesLocked(c *client) {
	for _, l := range append([]*candidacy(nil), s.queue...) {
		if l.c == c {
			s.withdrawLocked(l)
		}
	}
}

func (c *client) Campaign(ctx context.Context, cand core.Candidate) (core.Leadership, error) {
	if err := c.lock(ctx); err != nil {
		return nil, err
	}
	l := &candidacy{c: c, cand: cand, elected: make(chan struct{}), lost: make(chan struct{}), ended: make(chan struct{})}
	c.s.queue = append(c.s.queue, l)
	c.s.electLocked()
	c.s.mu.Unlock()
	select {
	case <-l.elected:
		c.s.mu.Lock()
		defer c.s.mu.Unlock()
		if ctx.Err() != nil || l.gone {
			c.s.withdrawLocked(l)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("%w: the session ended while campaigning", core.ErrSessionExpired)
		}
		return l, nil
	case <-ctx.Done():
	case <-l.ended: // the session expired or the client closed
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.s.withdrawLocked(l)
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case c.closed:
		return nil, core.ErrClosed
	}
	return nil, fmt.Errorf("%w: the session ended while campaigning", core.ErrSessionExpired)
}

func (c *client) Leader(ctx context.Context) (core.LeaderInfo, error) {
	if err := c.lock(ctx); err != nil {
		return core.LeaderInfo{}, err
	}
	defer c.s.mu.Unlock()
	l := c.s.leader
	if l == nil {
		return core.LeaderInfo{}, fmt.Errorf("%w: no leader", core.ErrNotFound)
	}
	return core.LeaderInfo{ID: l.cand.ID, Address: l.cand.Address, Epoch: l.epoch}, nil
}

func (c *client) ObserveLeader(ctx context.Context) (<-chan core.LeaderInfo, error) {
	if err := c.lock(ctx); err != nil {
		return nil, err
	}
	ch := make(chan core.LeaderInfo, 1)
	if l := c.s.leader; l != nil {
		ch <- core.LeaderInfo{ID: l.cand.ID, Address: l.cand.Address, Epoch: l.epoch}
	}
	c.s.watchers[ch] = true
	c.s.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-c.done:
		}
		c.s.mu.Lock()
		defer c.s.mu.Unlock()
		if c.s.watchers[ch] {
			delete(c.s.watchers, ch)
			close(ch)
		}
	}()
	return ch, nil
}
