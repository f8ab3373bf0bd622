package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/fanout"
	"github.com/metaplane/metaplane/internal/retry"
)

// Backend is one client of a ZooKeeper ensemble: one ZooKeeper session,
// every path under the configured root. It implements core.MetadataBackend
// and core.SessionExpirer. Open it with Provider.NewClient or Open.
//
// All methods are safe for concurrent use. A ZooKeeper session that expires
// is replaced by a new one (its ephemerals are gone; SessionExpired, then
// SessionConnected, are delivered; prefix watches re-arm and answer with a
// Reset).
type Backend struct {
	opts    Options
	name    string
	root    string
	servers []string
	timeout time.Duration // session timeout asked for
	conn    *zk.Conn
	wire    *wireState
	sem     chan struct{}
	acl     []zk.ACL
	// standalone: the one configured server reports standalone mode, so
	// every read sees every acknowledged write without a sync.
	standalone bool

	closeCh   chan struct{}
	closeOnce sync.Once
	// oneShotWarned: the warning that a watch fell back to one-shot
	// watches (a server before 3.6) was logged (once a client).
	oneShotWarned sync.Once
	wg            sync.WaitGroup

	evMu    sync.Mutex
	evQueue []zk.Event
	evKick  chan struct{}

	watchMu  sync.Mutex
	watchers map[*watcher]struct{}

	mu         sync.Mutex
	closed     bool
	state      core.SessionState
	sessionID  int64
	negotiated time.Duration // the session timeout the server granted
	changed    chan struct{} // closed and replaced on every state change
	// events fans the session events out; published under mu.
	events      fanout.Hub[core.SessionEvent]
	suspendTmr  *time.Timer
	leaderships map[*leadership]struct{}
	campaigning int
}

var (
	_ core.MetadataBackend = (*Backend)(nil)
	_ core.SessionExpirer  = (*Backend)(nil)
)

// sessionEventBuffer is how many session events a slow subscriber may have
// undelivered before the oldest is dropped.
const sessionEventBuffer = 64

// Open connects a new client with opts (validated; defaults filled in) and
// waits until it has a session, for at most opts.ConnectionTimeout. It
// creates the root when missing. Errors: configuration problems (naming the
// key), ErrUnavailable (no server reachable in time), context errors.
func Open(ctx context.Context, opts Options, copts core.ClientOptions) (*Backend, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	servers, _ := splitServers(o.Address)
	timeout := o.SessionTimeout
	if copts.SessionTimeout > 0 {
		timeout = copts.SessionTimeout
	}
	b := &Backend{
		opts:        o,
		name:        copts.Name,
		root:        strings.TrimSuffix(o.Root, "/"),
		servers:     servers,
		timeout:     timeout,
		wire:        &wireState{},
		sem:         make(chan struct{}, o.MaxInFlightRequests),
		acl:         zk.WorldACL(zk.PermAll),
		closeCh:     make(chan struct{}),
		evKick:      make(chan struct{}, 1),
		state:       core.SessionSuspended,
		changed:     make(chan struct{}),
		leaderships: map[*leadership]struct{}{},
		watchers:    map[*watcher]struct{}{},
	}
	logger := zk.Logger(discardLogger{})
	if o.Logf != nil {
		logger = funcLogger(o.Logf)
	}
	conn, _, err := zk.Connect(servers, timeout,
		zk.WithDialer(b.wire.dialer()),
		zk.WithEventCallback(b.onEvent),
		zk.WithLogger(logger),
		zk.WithLogInfo(false),
		zk.WithMaxBufferSize(o.MaxBufferSize),
		zk.WithMaxConnBufferSize(maxRequestSize+64<<10),
	)
	if err != nil {
		return nil, fmt.Errorf("%w: zookeeper.address %q: %v", core.ErrUnavailable, o.Address, err)
	}
	b.conn = conn
	b.wg.Add(1)
	go b.dispatch()

	wctx, cancel := context.WithTimeout(ctx, o.ConnectionTimeout)
	defer cancel()
	if err := b.waitConnected(wctx); err != nil {
		b.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: no ZooKeeper session with %s within zookeeper.client.connection-timeout (%v)",
			core.ErrUnavailable, o.Address, o.ConnectionTimeout)
	}
	if err := b.ensurePath(ctx, b.root); err != nil {
		b.Close()
		return nil, fmt.Errorf("create zookeeper.path.root %s: %w", b.root, err)
	}
	if len(servers) == 1 {
		if mode, err := serverMode(servers[0], time.Second); err == nil && mode == "standalone" {
			b.standalone = true
		}
	}
	return b, nil
}

type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}

type funcLogger func(string, ...any)

func (f funcLogger) Printf(format string, args ...any) {
	if strings.HasPrefix(format, "Xid < 0") {
		return // the reply to a request the backend wrote itself (wireState.call)
	}
	f("zookeeper: "+format, args...)
}

// onEvent is the library's event callback; it must not block: it queues.
func (b *Backend) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		// Node events (and the NotWatching events of an expiry) go to
		// the prefix watches they concern; the election and leader
		// observation read their own watch channels.
		b.watchMu.Lock()
		for w := range b.watchers {
			if w.concerns(ev.Path) {
				w.push(ev)
			}
		}
		b.watchMu.Unlock()
		return
	}
	b.evMu.Lock()
	b.evQueue = append(b.evQueue, ev)
	b.evMu.Unlock()
	select {
	case b.evKick <- struct{}{}:
	default:
	}
}

// dispatch turns the library's session events into core session events,
// in order.
func (b *Backend) dispatch() {
	defer b.wg.Done()
	for {
		select {
		case <-b.evKick:
		case <-b.closeCh:
			return
		}
		b.evMu.Lock()
		q := b.evQueue
		b.evQueue = nil
		b.evMu.Unlock()
		for _, ev := range q {
			b.handleSession(ev)
		}
	}
}

func (b *Backend) handleSession(ev zk.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	switch ev.State {
	case zk.StateHasSession:
		id := b.conn.SessionID()
		if b.state == core.SessionConnected && id == b.sessionID {
			return
		}
		if b.suspendTmr != nil {
			b.suspendTmr.Stop()
			b.suspendTmr = nil
		}
		b.sessionID = id
		if ms := b.wire.timeout.Load(); ms > 0 {
			b.negotiated = time.Duration(ms) * time.Millisecond
		} else {
			b.negotiated = b.timeout
		}
		b.setStateLocked(core.SessionConnected, id)
	case zk.StateDisconnected:
		if b.state != core.SessionConnected {
			return
		}
		b.setStateLocked(core.SessionSuspended, b.sessionID)
		// The server expires the session a session timeout after it last
		// heard from the client (ensemble permitting), and then another
		// candidate can win: leadership ends a session timeout after the
		// client last heard from the server.
		sid := b.sessionID
		d := b.negotiated - time.Since(time.Unix(0, b.wire.lastRead.Load()))
		b.suspendTmr = time.AfterFunc(max(d, 0), func() { b.suspendedTooLong(sid) })
	case zk.StateExpired:
		old := b.sessionID
		if b.suspendTmr != nil {
			b.suspendTmr.Stop()
			b.suspendTmr = nil
		}
		b.setStateLocked(core.SessionExpired, old)
		for l := range b.leaderships {
			if l.sessionID == old || old == 0 {
				l.lose("session expired")
			}
		}
	}
}

func (b *Backend) suspendedTooLong(sid int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.state != core.SessionSuspended || b.sessionID != sid {
		return
	}
	for l := range b.leaderships {
		if l.sessionID == sid {
			l.lose("disconnected for longer than the session timeout")
		}
	}
}

// setStateLocked records a state change and tells every subscriber.
func (b *Backend) setStateLocked(s core.SessionState, sid int64) {
	b.state = s
	close(b.changed)
	b.changed = make(chan struct{})
	b.events.Publish(core.SessionEvent{State: s, SessionID: sid})
}

// waitConnected blocks until the client has a session.
func (b *Backend) waitConnected(ctx context.Context) error {
	for {
		b.mu.Lock()
		st, ch, closed := b.state, b.changed, b.closed
		b.mu.Unlock()
		if closed {
			return core.ErrClosed
		}
		if st == core.SessionConnected {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-b.closeCh:
			return core.ErrClosed
		}
	}
}

// Session returns the current session. It does not block.
func (b *Backend) Session() core.SessionInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.state
	if b.closed {
		st = core.SessionClosed
	}
	to := b.negotiated
	if to == 0 {
		to = b.timeout
	}
	return core.SessionInfo{ID: b.sessionID, Timeout: to, State: st}
}

// SessionEvents returns this client's session events from the next one on
// (connected, suspended, expired; closed at Close). A consumer that falls 64
// events behind loses the oldest. The channel is closed when ctx ends or
// the backend closes. Errors: ErrClosed.
func (b *Backend) SessionEvents(ctx context.Context) (<-chan core.SessionEvent, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, core.ErrClosed
	}
	return b.events.Subscribe(ctx, sessionEventBuffer), nil
}

// Capabilities returns what the ZooKeeper backend supports: no exact
// history (watches are built on one-shot watches and coalesce), stale reads
// (a read without sync is served by the connected server), and values up
// to MaxValueSize.
func (b *Backend) Capabilities() core.Capabilities { return capabilities() }

func capabilities() core.Capabilities {
	return core.Capabilities{
		Name:          "zookeeper",
		StaleReads:    true,
		SessionExpiry: true,
		MaxValueSize:  MaxValueSize,
		SelectorKey:   "zookeeper.address",
		// StreamSnapshot: a persistent recursive watch and a spill file
		// (stream.go).
		StreamedSnapshots: true,
	}
}

// Status returns this client's view: its session, the server it is
// connected to, the leader and epoch read from the tree, the highest zxid
// seen (Revision), and the ensemble's members with the mode each reports
// to the `srvr` four-letter word (leader, follower, standalone; unknown
// when it does not answer within half a second or `srvr` is not
// whitelisted). Errors: ErrClosed, context errors.
func (b *Backend) Status(ctx context.Context) (core.Status, error) {
	if b.isClosed() {
		return core.Status{}, core.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return core.Status{}, err
	}
	b.mu.Lock()
	role := core.RoleObserver
	if len(b.leaderships) > 0 {
		role = core.RoleLeader
	} else if b.campaigning > 0 {
		role = core.RoleCandidate
	}
	sid, st := b.sessionID, b.state
	granted := b.negotiated
	if granted == 0 {
		granted = b.timeout
	}
	b.mu.Unlock()
	s := core.Status{
		Backend:  "zookeeper",
		MemberID: b.name,
		Role:     role,
		Revision: b.wire.lastZxid.Load(),
		Details: map[string]string{
			"server":          b.conn.Server(),
			"servers":         strings.Join(b.servers, ","),
			"path_root":       b.root,
			"session_id":      "0x" + strconv.FormatInt(sid, 16),
			"session_state":   st.String(),
			"session_timeout": granted.String(), // as granted by the server
		},
	}
	s.CommitIndex, s.AppliedIndex = s.Revision, s.Revision
	s.Members = b.members(ctx)
	if li, err := b.Leader(ctx); err == nil {
		s.Epoch, s.LeaderID, s.LeaderAddress = li.Epoch, li.ID, li.Address
	} else if !errors.Is(err, core.ErrNotFound) {
		s.Details["leader_error"] = err.Error()
	}
	return s, nil
}

func (b *Backend) isClosed() bool {
	select {
	case <-b.closeCh:
		return true
	default:
		return false
	}
}

// Close ends the session (the server deletes its ephemerals at once),
// ends every leadership and watch, and closes the session-event channels
// after a final SessionClosed event. Idempotent.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		ls := make([]*leadership, 0, len(b.leaderships))
		for l := range b.leaderships {
			ls = append(ls, l)
		}
		b.mu.Unlock()
		for _, l := range ls {
			l.lose("backend closed")
		}
		b.mu.Lock()
		if b.suspendTmr != nil {
			b.suspendTmr.Stop()
		}
		b.setStateLocked(core.SessionClosed, b.sessionID)
		b.closed = true
		b.events.Close()
		b.mu.Unlock()
		close(b.closeCh)
		if b.conn != nil {
			b.conn.Close()
		}
		b.wg.Wait()
	})
	return nil
}

// zpath maps a contract path to its znode path under the root.
func (b *Backend) zpath(p string) string {
	if p == "/" {
		return b.root
	}
	return b.root + p
}

// rel maps a znode path under the root back to a contract path.
func (b *Backend) rel(zp string) string {
	r := strings.TrimPrefix(zp, b.root)
	if r == "" {
		return "/"
	}
	return r
}

func convStat(s *zk.Stat) core.Stat {
	if s == nil {
		return core.Stat{}
	}
	return core.Stat{
		Version:        int64(s.Version),
		CreateRevision: s.Czxid,
		ModifyRevision: s.Mzxid,
		CreateTime:     s.Ctime,
		ModifyTime:     s.Mtime,
		EphemeralOwner: s.EphemeralOwner,
		NumChildren:    s.NumChildren,
		DataLength:     s.DataLength,
		// pzxid: the zxid of the last child created or deleted.
		ChildrenRevision: s.Pzxid,
	}
}

// do runs one library call under the in-flight limit. Cancelling ctx
// returns at once with ctx's error; the call itself completes in the
// background (the library cannot cancel a request).
func (b *Backend) do(ctx context.Context, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case b.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-b.closeCh:
		return core.ErrClosed
	}
	done := make(chan error, 1)
	go func() {
		defer func() { <-b.sem }()
		done <- fn()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// read runs an idempotent call, retrying it after a lost connection up to
// MaxRetryAttempts times with a growing pause (RetryWait, doubled per
// attempt, capped at 4x). The error is the library's (map it).
func (b *Backend) read(ctx context.Context, fn func() error) error {
	wait := retry.New(b.opts.RetryWait, 4*b.opts.RetryWait)
	for attempt := 0; ; attempt++ {
		err := b.do(ctx, fn)
		if err == nil || !retriable(err) || attempt >= b.opts.MaxRetryAttempts {
			return err
		}
		if !retry.Sleep(ctx, wait.Next(), b.closeCh) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return core.ErrClosed
		}
	}
}

// parallelWorkers bounds the goroutines of one parallel call: the
// requests pipeline on the one connection (each also takes an in-flight
// slot through do), so a few dozen keep it busy, and a level of a large
// tree does not start a goroutine per node.
const parallelWorkers = 64

// parallel runs fn(i) for i in [0, n) on at most parallelWorkers
// goroutines and returns the first error (the calls not started yet are
// skipped after one fails).
func parallel(n int, fn func(i int) error) error {
	if n == 1 {
		return fn(0)
	}
	var next atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for w := 0; w < min(n, parallelWorkers); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for first.Load() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return *e
	}
	return nil
}

// closedErr returns ErrClosed when the backend is closed, else err.
func (b *Backend) closedErr(err error) error {
	if b.isClosed() {
		return core.ErrClosed
	}
	return err
}

// ensurePath creates znode zp and its missing ancestors as empty persistent
// nodes (concurrent creators are fine).
func (b *Backend) ensurePath(ctx context.Context, zp string) error {
	parts := strings.Split(strings.TrimPrefix(zp, "/"), "/")
	cur := ""
	for _, p := range parts {
		cur += "/" + p
		path := cur
		var exists bool
		err := b.read(ctx, func() error {
			var err error
			exists, _, err = b.conn.Exists(path)
			return err
		})
		if err != nil {
			return mapErr(err, path, false)
		}
		if exists {
			continue
		}
		err = b.read(ctx, func() error {
			_, err := b.conn.Create(path, nil, zk.FlagPersistent, b.acl)
			if errors.Is(err, zk.ErrNodeExists) {
				return nil
			}
			return err
		})
		if err != nil {
			return mapErr(err, path, true)
		}
	}
	return nil
}

// members asks every configured server for its mode with `srvr`.
func (b *Backend) members(ctx context.Context) []core.MemberStatus {
	out := make([]core.MemberStatus, len(b.servers))
	var wg sync.WaitGroup
	for i, addr := range b.servers {
		out[i] = core.MemberStatus{ID: addr, Address: addr, Role: core.RoleUnknown}
		wg.Add(1)
		go func(i int, addr string) {
			defer wg.Done()
			timeout := 500 * time.Millisecond
			if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
				timeout = time.Until(d)
			}
			if timeout <= 0 {
				return
			}
			mode, err := serverMode(addr, timeout)
			if err != nil {
				return
			}
			switch mode {
			case "leader":
				out[i].Role = core.RoleLeader
			case "follower":
				out[i].Role = core.RoleFollower
			case "observer":
				out[i].Role = core.RoleObserver
			case "standalone":
				out[i].Role = core.RoleStandalone
			}
		}(i, addr)
	}
	wg.Wait()
	return out
}

func (b *Backend) addWatcher(w *watcher) {
	b.watchMu.Lock()
	b.watchers[w] = struct{}{}
	b.watchMu.Unlock()
}

func (b *Backend) removeWatcher(w *watcher) {
	b.watchMu.Lock()
	delete(b.watchers, w)
	b.watchMu.Unlock()
}
