package plugins

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/deadline"
	"github.com/metaplane/metaplane/internal/fanout"
	pb "github.com/metaplane/metaplane/proto/metaplane/v1"
)

// Client is the host side of one plugin client: a core.MetadataBackend
// (one session) whose calls cross the plugin boundary. It implements the
// required contract only; Plugin.NewClient wraps it in one layer per
// optional part the plugin declared (parts.go), so core.Optional finds
// exactly the parts the plugin's backend offers and nothing else.
//
// When the plugin process dies, in-flight and new calls fail with
// core.ErrUnavailable, every Leadership's Lost channel closes, watches end
// with a final ErrUnavailable response, and session-event subscribers
// receive SessionExpired for the lost session. Once the host has restarted
// the plugin, the client opens a new session on it (SessionConnected with
// the new id) and calls work again; leader observations resume by
// themselves. Ephemeral nodes of the lost session are gone, as after any
// expiry.
//
// A Client is safe for concurrent use.
type Client struct {
	p    *Plugin
	opts core.ClientOptions
	caps core.Capabilities

	mu      sync.Mutex
	rem     *remote // nil while the plugin is down
	closed  bool
	session core.SessionInfo
	// changed is closed and replaced whenever rem or session changes.
	changed chan struct{}

	// events fans the session events out to SessionEvents' subscribers.
	events fanout.Hub[core.SessionEvent]

	// passThrough: the host answers nothing itself (see
	// Plugin.NewConformanceClient). closedRem is then, after Close, the
	// closed incarnation, which calls still address.
	passThrough bool
	closedRem   *remote

	// campaignSeq numbers the client's campaigns (see withdraw).
	campaignSeq atomic.Uint64
}

// remote is a client's incarnation in one plugin process.
type remote struct {
	conn *conn
	id   uint64
	// ctx ends when the incarnation does (plugin died, client closed).
	ctx    context.Context
	cancel context.CancelFunc
}

var _ core.MetadataBackend = (*Client)(nil)

// sessionSubBuffer is how many session events a slow subscriber may have
// pending before the oldest are dropped.
const sessionSubBuffer = 16

// callTimeout bounds the host's housekeeping calls that have no context of
// their own (Close, FailNextWrite, SetLatency).
const callTimeout = 5 * time.Second

// openRemote opens a client in the plugin behind cn and its session-event
// pump. The pump's subscription is in place when it returns.
func openRemote(ctx context.Context, cn *conn, opts core.ClientOptions, passThrough bool) (*remote, *pb.NewClientResponse, pb.Backend_SessionEventsClient, error) {
	nctx := ctx
	if passThrough {
		nctx = metadata.AppendToOutgoingContext(ctx, mdPassThrough, "1")
	}
	resp, err := cn.rpc.NewClient(nctx, &pb.NewClientRequest{SessionTimeoutNanos: int64(opts.SessionTimeout), Name: opts.Name})
	if err != nil {
		return nil, nil, nil, callError(ctx, cn, err)
	}
	rctx, cancel := context.WithCancel(cn.ctx)
	r := &remote{conn: cn, id: resp.ClientId, ctx: rctx, cancel: cancel}
	// The pump's stream lives as long as the incarnation; ctx bounds only
	// its start.
	stop := context.AfterFunc(ctx, cancel)
	stream, err := cn.rpc.SessionEvents(rctx, &pb.SessionEventsRequest{ClientId: r.id})
	if err == nil {
		var first *pb.SessionEventsResponse
		first, err = stream.Recv()
		if err == nil && !first.Started {
			err = fmt.Errorf("%w: plugin protocol: session events did not start", core.ErrUnavailable)
		}
		if err == nil && first.Session != nil {
			resp.Session = first.Session
		}
	}
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		err = callError(ctx, cn, err)
		cancel()
		cctx, ccancel := context.WithTimeout(context.Background(), callTimeout)
		_, _ = cn.rpc.CloseClient(cctx, &pb.CloseClientRequest{ClientId: r.id})
		ccancel()
		return nil, nil, nil, err
	}
	return r, resp, stream, nil
}

// callError translates a failed call's error: a context error of the
// caller's ctx wins, a call on a dead plugin is core.ErrUnavailable, and
// everything else goes through the translation table.
func callError(ctx context.Context, cn *conn, err error) error {
	if cerr := deadline.Err(ctx); cerr != nil {
		e := FromStatus(err)
		if errors.Is(e, cerr) {
			return e
		}
		return fmt.Errorf("plugin call: %w", cerr)
	}
	e := FromStatus(err)
	if cn != nil && cn.ctx.Err() != nil && !errors.Is(e, core.ErrUnavailable) {
		return fmt.Errorf("%w: plugin %s exited during the call (%v)", core.ErrUnavailable, cn.name, e)
	}
	return e
}

// start runs the session-event pump of r.
func (c *Client) start(r *remote, stream pb.Backend_SessionEventsClient) {
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				break
			}
			info := sessionInfoFromProto(m.Session)
			c.mu.Lock()
			if c.rem == r {
				c.session = info
				c.broadcastLocked()
			}
			c.mu.Unlock()
			c.publish(core.SessionEvent{State: core.SessionState(m.State), SessionID: m.SessionId})
		}
		// The stream ended: the client was closed, the plugin died, or the
		// plugin closed the client by itself.
		c.lose(r, nil)
	}()
}

// lose ends incarnation r (if it is still the current one): subscribers see
// SessionExpired for its session, and calls fail with ErrUnavailable until
// reconnect.
func (c *Client) lose(r *remote, cause error) {
	c.mu.Lock()
	if c.rem != r || r == nil {
		c.mu.Unlock()
		return
	}
	c.rem = nil
	old := c.session.ID
	closed := c.closed
	c.session.State = core.SessionExpired
	c.broadcastLocked()
	c.mu.Unlock()
	r.cancel()
	if !closed {
		if cause != nil {
			c.p.logger.Warn("plugin client lost its session", "client", c.opts.Name, "session", old, "error", cause)
		}
		c.publish(core.SessionEvent{State: core.SessionExpired, SessionID: old})
	}
}

// reconnectBackoff caps the pause between a client's attempts to open
// its new incarnation after a restart.
const reconnectBackoff = 2 * time.Second

// reconnect opens a new incarnation of the client on cn after a restart.
// It keeps trying, with a pause doubling up to reconnectBackoff, for as
// long as cn lives and the client is open: a backend that needs a while
// before it can open a session (a Raft member catching up after a crash)
// must not leave the client without a session for good. Calls fail with
// ErrUnavailable meanwhile.
func (c *Client) reconnect(cn *conn) {
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if closed || cn.ctx.Err() != nil {
			return
		}
		ctx, cancel := context.WithTimeout(cn.ctx, callTimeout)
		r, resp, stream, err := openRemote(ctx, cn, c.opts, c.passThrough)
		cancel()
		if err != nil {
			if attempt <= 3 || attempt%10 == 0 {
				c.p.logger.Warn("plugin client could not reconnect; retrying", "client", c.opts.Name, "attempt", attempt, "error", err)
			}
			select {
			case <-time.After(wait):
			case <-cn.ctx.Done():
				return
			}
			wait = min(2*wait, reconnectBackoff)
			continue
		}
		info := sessionInfoFromProto(resp.Session)
		c.mu.Lock()
		if c.closed || c.rem != nil {
			c.mu.Unlock()
			r.cancel()
			cctx, ccancel := context.WithTimeout(context.Background(), callTimeout)
			_, _ = cn.rpc.CloseClient(cctx, &pb.CloseClientRequest{ClientId: r.id})
			ccancel()
			return
		}
		c.rem = r
		c.session = info
		c.broadcastLocked()
		c.mu.Unlock()
		c.start(r, stream)
		c.publish(core.SessionEvent{State: core.SessionConnected, SessionID: info.ID})
		return
	}
}

func (c *Client) broadcastLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// current returns the live incarnation, or the error a call gets without
// one.
func (c *Client) current() (*remote, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		if c.closedRem != nil {
			return c.closedRem, nil
		}
		return nil, fmt.Errorf("%w: plugin client closed", core.ErrClosed)
	}
	if c.rem == nil {
		return nil, c.p.downError()
	}
	return c.rem, nil
}

// The gRPC metadata keys of pass-through clients (see
// Plugin.NewConformanceClient): mdPassThrough on NewClient marks the
// client; mdContextEnded on a call says that the caller's context had
// ended before the call ("canceled" or "deadline"), so the plugin calls its
// backend with a context ended the same way.
const (
	mdPassThrough  = "metaplane-pass-through"
	mdContextEnded = "metaplane-context-ended"
)

// passCtx returns the context a unary call sends to the plugin: ctx
// itself, or, on a pass-through client whose ctx has already ended (which
// gRPC would refuse to send), a live context bounded by callTimeout that
// tells the plugin how ctx ended. Calls use the returned context for
// everything, their error translation included, so that the plugin's
// answer, not the host's, is what the caller gets.
func (c *Client) passCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return passEnded(ctx, endedHow(c.passThrough, ctx))
}

// passEnded is passCtx for a ctx that ended as how says (see endedHow).
func passEnded(ctx context.Context, how string) (context.Context, context.CancelFunc) {
	if how == "" {
		return ctx, func() {}
	}
	live, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	return metadata.AppendToOutgoingContext(live, mdContextEnded, how), cancel
}

// endedHow is how ctx ended ("canceled" or "deadline") for a pass-through
// client, "" when it has not ended or the client is not one.
func endedHow(passThrough bool, ctx context.Context) string {
	switch {
	case !passThrough || ctx.Err() == nil:
		return ""
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return "deadline"
	}
	return "canceled"
}

// call makes one unary call of c's in the plugin: send makes it on the
// live incarnation with the context the plugin is to see (see passCtx),
// and its error is translated (see callError). On an error the value
// send returns is dropped, so it may convert a nil answer through the
// answer's getters.
func call[T any](c *Client, ctx context.Context, send func(context.Context, *remote) (T, error)) (T, error) {
	ctx, done := c.passCtx(ctx)
	defer done()
	var zero T
	r, err := c.current()
	if err != nil {
		return zero, err
	}
	v, err := send(ctx, r)
	if err != nil {
		return zero, callError(ctx, r.conn, err)
	}
	return v, nil
}

// callErr is call for a call whose only result is its error.
func callErr[Resp any](c *Client, ctx context.Context, send func(context.Context, *remote) (Resp, error)) error {
	_, err := call(c, ctx, send)
	return err
}

// housekeep makes a call of c's that no caller waits for (FailNextWrite,
// SetLatency): bounded by callTimeout; failures, and calls without a live
// incarnation, are logged as what's.
func (c *Client) housekeep(what string, send func(context.Context, *remote) error) {
	r, err := c.current()
	if err != nil {
		c.p.logger.Warn(what+" ignored", "error", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := send(ctx, r); err != nil {
		c.p.logger.Warn(what+" failed", "error", callError(ctx, r.conn, err))
	}
}

// ---- session events fan-out ----

// publish delivers ev to every subscriber, dropping a slow subscriber's
// oldest pending event when its buffer is full. After Close it does
// nothing.
func (c *Client) publish(ev core.SessionEvent) {
	c.events.Publish(ev)
}

// ---- the contract ----

// GetMany reads many paths in one plugin call. See core.Reader.
func (c *Client) GetMany(ctx context.Context, paths []string, opts core.ReadOptions) ([]core.GetResult, error) {
	return call(c, ctx, func(ctx context.Context, r *remote) ([]core.GetResult, error) {
		resp, err := r.conn.rpc.GetMany(ctx, &pb.GetManyRequest{ClientId: r.id, Paths: paths, Options: readOptionsToProto(opts)})
		return getResultsFromProto(resp.GetResults()), err
	})
}

// Children lists path's children. See core.Reader.
func (c *Client) Children(ctx context.Context, path string, opts core.ReadOptions) ([]string, core.Stat, error) {
	resp, err := call(c, ctx, func(ctx context.Context, r *remote) (*pb.ChildrenResponse, error) {
		return r.conn.rpc.Children(ctx, &pb.ChildrenRequest{ClientId: r.id, Path: path, Options: readOptionsToProto(opts)})
	})
	if err != nil {
		return nil, core.Stat{}, err
	}
	names := resp.Names
	if names == nil {
		names = []string{}
	}
	return names, statFromProto(resp.Stat), nil
}

// Snapshot reads every node under prefix in one plugin call. See
// core.Reader.
func (c *Client) Snapshot(ctx context.Context, prefix string) (core.Snapshot, error) {
	return call(c, ctx, func(ctx context.Context, r *remote) (core.Snapshot, error) {
		resp, err := r.conn.rpc.Snapshot(ctx, &pb.SnapshotRequest{ClientId: r.id, Prefix: prefix})
		return core.Snapshot{Revision: resp.GetRevision(), Nodes: nodesFromProto(resp.GetNodes())}, err
	})
}

// Txn applies ops atomically in the plugin. See core.Writer; a failed op's
// *core.TxnError keeps its index across the boundary.
//
// Concurrent calls share a message each way on the connection's TxnStream
// (see txnMux); a plugin without it gets unary Txn calls.
func (c *Client) Txn(ctx context.Context, ops []core.Op, opts core.TxnOptions) (core.TxnResult, error) {
	ended := endedHow(c.passThrough, ctx) // TxnStream carries it in the call
	return call(c, ctx, func(ctx context.Context, r *remote) (core.TxnResult, error) {
		req := &pb.TxnRequest{ClientId: r.id, Ops: opsToProto(ops), Fence: fenceToProto(opts.Fence)}
		if err := ctx.Err(); err != nil {
			// What gRPC answers a call whose context has ended, unsent.
			return core.TxnResult{}, status.FromContextError(err).Err()
		}
		resp, err, ok := r.conn.txnMux().do(ctx, req, ended)
		if !ok {
			resp, err = r.conn.rpc.Txn(ctx, req)
		}
		return txnResultFromProto(resp), err
	})
}

// watchBuffer is the host-side buffer of a watch channel; beyond it gRPC's
// flow control holds the plugin back, and the backend's own slow-consumer
// rule applies.
const watchBuffer = 64

// Watch streams changes from the plugin. See core.Watcher. When the plugin
// dies the channel gets a final response whose Err wraps ErrUnavailable.
func (c *Client) Watch(ctx context.Context, prefix string, fromRevision int64) (<-chan core.WatchResponse, error) {
	r, err := c.current()
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(r.ctx, cancel)
	stream, err := r.conn.rpc.Watch(sctx, &pb.WatchRequest{ClientId: r.id, Prefix: prefix, FromRevision: fromRevision, Parts: true})
	var first *pb.WatchResponse
	if err == nil {
		first, err = stream.Recv()
	}
	if err == nil && !first.Started {
		err = fmt.Errorf("%w: plugin protocol: watch did not start", core.ErrUnavailable)
	}
	if err != nil {
		stop()
		cancel()
		return nil, c.streamError(ctx, r, err)
	}
	out := make(chan core.WatchResponse, watchBuffer)
	go func() {
		defer close(out)
		defer cancel()
		defer stop()
		// joined holds the parts of a response sent in parts (more) until
		// its last part.
		var joined []core.WatchEvent
		for {
			m, err := stream.Recv()
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, io.EOF) || c.isClosed() {
					return
				}
				select {
				case out <- core.WatchResponse{Err: c.streamError(ctx, r, err)}:
				case <-ctx.Done():
				}
				return
			}
			resp := watchResponseFromProto(m)
			if m.More {
				joined = append(joined, resp.Events...)
				continue
			}
			if joined != nil {
				resp.Events, joined = append(joined, resp.Events...), nil
			}
			select {
			case out <- resp:
			case <-ctx.Done():
				return
			}
			if resp.Err != nil {
				return
			}
		}
	}()
	return out, nil
}

// streamError translates a stream's error: a stream cut because the
// incarnation ended is ErrUnavailable (or ErrClosed once the client is
// closed).
func (c *Client) streamError(ctx context.Context, r *remote, err error) error {
	if ctx.Err() == nil && r.ctx.Err() != nil {
		if c.isClosed() {
			return fmt.Errorf("%w: plugin client closed", core.ErrClosed)
		}
		return fmt.Errorf("%w: plugin %s: %v", core.ErrUnavailable, r.conn.name, c.p.downError())
	}
	return callError(ctx, r.conn, err)
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Session returns the client's current session, as last reported by the
// plugin. It does not block.
func (c *Client) Session() core.SessionInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session
}

// SessionEvents subscribes to the client's session events. See
// core.Sessions. Plugin deaths and restarts appear as SessionExpired and
// SessionConnected.
func (c *Client) SessionEvents(ctx context.Context) (<-chan core.SessionEvent, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		if r := c.closedRem; r != nil {
			return c.closedSessionEvents(ctx, r)
		}
		return nil, fmt.Errorf("%w: plugin client closed", core.ErrClosed)
	}
	return c.events.Subscribe(ctx, sessionSubBuffer), nil
}

// closedSessionEvents asks the plugin for the session events of a closed
// pass-through client, so that its backend answers: an error, or (a
// backend that serves after Close) the events it sends.
func (c *Client) closedSessionEvents(ctx context.Context, r *remote) (<-chan core.SessionEvent, error) {
	sctx, cancel := context.WithCancel(ctx)
	stream, err := r.conn.rpc.SessionEvents(sctx, &pb.SessionEventsRequest{ClientId: r.id})
	if err == nil {
		_, err = stream.Recv()
	}
	if err != nil {
		cancel()
		return nil, c.streamError(ctx, r, err)
	}
	out := make(chan core.SessionEvent, sessionSubBuffer)
	go func() {
		defer close(out)
		defer cancel()
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case out <- core.SessionEvent{State: core.SessionState(m.State), SessionID: m.SessionId}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// Campaign campaigns in the plugin. See core.Elector. Cancelling ctx
// before election withdraws the candidacy in the plugin.
func (c *Client) Campaign(ctx context.Context, cand core.Candidate) (core.Leadership, error) {
	ctx, done := c.passCtx(ctx)
	defer done()
	// An already ended ctx must elect nobody: the stream's own context is
	// only cancelled by an AfterFunc, which would race with the request.
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("campaign: %w", err)
	}
	r, err := c.current()
	if err != nil {
		return nil, err
	}
	// The stream outlives ctx once elected: it carries the leadership's
	// loss. Before election, ctx ending cancels it.
	sctx, scancel := context.WithCancel(r.ctx)
	stop := context.AfterFunc(ctx, scancel)
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		sctx = metadata.NewOutgoingContext(sctx, md) // passCtx's mark
	}
	cid := c.campaignSeq.Add(1)
	stream, err := r.conn.rpc.Campaign(sctx, &pb.CampaignRequest{ClientId: r.id, Candidate: &pb.Candidate{Id: cand.ID, Address: cand.Address}, CampaignId: cid})
	var m *pb.CampaignResponse
	if err == nil {
		m, err = stream.Recv()
	}
	if err == nil && m.Lost {
		err = fmt.Errorf("%w: leadership lost at once", core.ErrUnavailable)
	}
	if err != nil {
		stop()
		scancel()
		if cerr := ctx.Err(); cerr != nil {
			c.withdraw(r, cid)
			return nil, fmt.Errorf("campaign: %w", cerr)
		}
		return nil, c.streamError(ctx, r, err)
	}
	if !stop() {
		// ctx ended just as the election was won: the stream is cancelled
		// and the plugin resigns.
		scancel()
		c.withdraw(r, cid)
		return nil, fmt.Errorf("campaign: %w", ctx.Err())
	}
	l := &leadership{c: c, r: r, id: m.LeadershipId, epoch: m.Epoch, fence: fenceFromProto(m.Fence), lost: make(chan struct{}), cancel: scancel}
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil || m.Lost {
				break
			}
		}
		l.markLost()
	}()
	return l, nil
}

// withdraw makes sure campaign cid has ended in the plugin before
// Campaign reports it cancelled: cancelling the stream alone ends it in
// the plugin some time later, when a current leader's resignation could
// still elect it. Bounded by callTimeout; a failure is logged (the
// cancelled stream withdraws it anyway).
func (c *Client) withdraw(r *remote, cid uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := r.conn.rpc.Resign(ctx, &pb.ResignRequest{ClientId: r.id, CampaignId: cid}); err != nil && r.ctx.Err() == nil {
		c.p.logger.Warn("plugin did not confirm a cancelled campaign's withdrawal", "client", c.opts.Name, "error", callError(ctx, r.conn, err))
	}
}

// leadership is the host side of a leadership held in the plugin.
type leadership struct {
	c      *Client
	r      *remote
	id     uint64
	epoch  int64
	fence  core.Fence
	lost   chan struct{}
	once   sync.Once
	cancel context.CancelFunc
}

func (l *leadership) markLost() {
	l.once.Do(func() {
		close(l.lost)
		l.cancel()
	})
}

// Epoch returns the leadership's epoch.
func (l *leadership) Epoch() int64 { return l.epoch }

// Fence returns the leadership's fence.
func (l *leadership) Fence() core.Fence { return l.fence }

// Lost is closed when the leadership ends, also when the plugin dies.
func (l *leadership) Lost() <-chan struct{} { return l.lost }

// Resign resigns in the plugin and returns once Lost is closed. Errors:
// ErrUnavailable (the plugin is gone, or did not answer or report the loss
// within hostResignTimeout; the leadership is lost anyway), context errors.
func (l *leadership) Resign(ctx context.Context) error {
	select {
	case <-l.lost:
		return nil
	default:
	}
	// A plugin that never answers, or never reports the loss, must not
	// hang the host, whatever ctx says: both waits have a bound of their
	// own, after which the campaign stream is ended (which resigns in the
	// plugin too) and the leadership is lost on this side.
	bctx, cancel := context.WithTimeout(ctx, hostResignTimeout)
	defer cancel()
	_, err := l.r.conn.rpc.Resign(bctx, &pb.ResignRequest{ClientId: l.r.id, LeadershipId: l.id})
	if err != nil {
		if deadline.Err(ctx) == nil && deadline.Err(bctx) != nil {
			l.markLost()
			return fmt.Errorf("%w: plugin did not answer Resign within %v; the leadership is given up on the host", core.ErrUnavailable, hostResignTimeout)
		}
		err = l.c.streamError(ctx, l.r, err)
		if errors.Is(err, core.ErrUnavailable) || errors.Is(err, core.ErrClosed) {
			l.markLost()
		}
		return err
	}
	select {
	case <-l.lost:
	case <-bctx.Done():
		// Ending the stream resigns too.
		l.markLost()
		if ctx.Err() == nil {
			return fmt.Errorf("%w: plugin resigned but did not report the leadership lost within %v; the leadership is given up on the host", core.ErrUnavailable, hostResignTimeout)
		}
	}
	return nil
}

// hostResignTimeout bounds each of the host's waits in Resign (the
// plugin's answer, then its report of the loss). A variable for the
// package's tests.
var hostResignTimeout = 10 * time.Second

// Leader returns the current leader. See core.Elector.
func (c *Client) Leader(ctx context.Context) (core.LeaderInfo, error) {
	return call(c, ctx, func(ctx context.Context, r *remote) (core.LeaderInfo, error) {
		resp, err := r.conn.rpc.Leader(ctx, &pb.LeaderRequest{ClientId: r.id})
		return leaderFromProto(resp.GetLeader()), err
	})
}

// ObserveLeader delivers the current leader and its changes. See
// core.Elector. The observation survives plugin restarts (it resubscribes);
// a slow consumer sees the latest leader.
func (c *Client) ObserveLeader(ctx context.Context) (<-chan core.LeaderInfo, error) {
	r, err := c.current()
	if err != nil {
		return nil, err
	}
	stream, cancel, err := c.observe(ctx, r)
	if err != nil {
		return nil, err
	}
	// One subscriber, a buffer of one: the latest leader wins, and the
	// channel closes as soon as ctx ends.
	var hub fanout.Hub[core.LeaderInfo]
	out := hub.Subscribe(ctx, 1)
	go func() {
		defer hub.Close()
		for {
			for {
				m, err := stream.Recv()
				if err != nil {
					break
				}
				hub.Publish(leaderFromProto(m.Leader))
			}
			cancel()
			// Resubscribe on the next incarnation unless the observation or
			// the client is over.
			for {
				c.mu.Lock()
				closed, rem, changed := c.closed, c.rem, c.changed
				c.mu.Unlock()
				if closed || ctx.Err() != nil {
					return
				}
				if rem != nil && rem != r {
					r = rem
					break
				}
				if rem == r && r.ctx.Err() == nil {
					// The plugin ended the stream while the client lives:
					// the backend closed it.
					return
				}
				select {
				case <-changed:
				case <-ctx.Done():
					return
				case <-c.p.Done():
					return
				}
			}
			stream, cancel, err = c.observe(ctx, r)
			if err != nil {
				return
			}
		}
	}()
	return out, nil
}

func (c *Client) observe(ctx context.Context, r *remote) (pb.Backend_ObserveLeaderClient, context.CancelFunc, error) {
	sctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(r.ctx, cancel)
	stream, err := r.conn.rpc.ObserveLeader(sctx, &pb.ObserveLeaderRequest{ClientId: r.id})
	var first *pb.ObserveLeaderResponse
	if err == nil {
		first, err = stream.Recv()
	}
	if err == nil && !first.Started {
		err = fmt.Errorf("%w: plugin protocol: leader observation did not start", core.ErrUnavailable)
	}
	if err != nil {
		stop()
		cancel()
		return nil, nil, c.streamError(ctx, r, err)
	}
	return stream, func() { stop(); cancel() }, nil
}

// Status returns the plugin's view of the backend. See
// core.MetadataBackend.
func (c *Client) Status(ctx context.Context) (core.Status, error) {
	return call(c, ctx, func(ctx context.Context, r *remote) (core.Status, error) {
		resp, err := r.conn.rpc.Status(ctx, &pb.StatusRequest{ClientId: r.id})
		if err != nil {
			return core.Status{}, err
		}
		return statusFromProto(resp), nil
	})
}

// Capabilities returns the backend's capabilities, as the plugin reported
// them when the client opened. It does not block.
func (c *Client) Capabilities() core.Capabilities { return c.caps }

// Close closes the client in the plugin (ending its session), resigns its
// leaderships, and closes its watch and event channels. Idempotent; the
// error is the plugin's answer to the first call.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		r := c.closedRem
		c.mu.Unlock()
		if r == nil {
			return nil
		}
		// Pass-through: the backend answers Close again.
		return closeRemote(r)
	}
	c.closed = true
	r := c.rem
	c.rem = nil
	if c.passThrough && r != nil {
		// Later calls still reach the closed client in the plugin; they
		// are not cut by the incarnation's end.
		c.closedRem = &remote{conn: r.conn, id: r.id, ctx: r.conn.ctx, cancel: func() {}}
	}
	c.session.State = core.SessionClosed
	sid := c.session.ID
	c.broadcastLocked()
	c.mu.Unlock()
	c.p.forget(c)
	// Atomically the last event: a pump event racing with Close cannot
	// follow SessionClosed.
	c.events.CloseWith(core.SessionEvent{State: core.SessionClosed, SessionID: sid})
	if r == nil {
		return nil
	}
	defer r.cancel()
	return closeRemote(r)
}

// closeRemote closes r's client in the plugin, bounded by callTimeout.
func closeRemote(r *remote) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := r.conn.rpc.CloseClient(ctx, &pb.CloseClientRequest{ClientId: r.id}); err != nil {
		if r.conn.ctx.Err() != nil {
			return nil // the plugin is gone: nothing left to close
		}
		return callError(ctx, r.conn, err)
	}
	return nil
}
