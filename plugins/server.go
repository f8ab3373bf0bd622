package plugins

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/metaplane/metaplane/core"
	pb "github.com/metaplane/metaplane/proto/metaplane/v1"
)

// server is the plugin side of the wire: it serves one core.Provider and
// the clients the host opens on it.
type server struct {
	pb.UnimplementedBackendServer

	provider core.Provider

	mu      sync.Mutex
	started bool
	nextID  uint64
	clients map[uint64]*serverClient
	// shut holds the pass-through clients the host has closed: their
	// later calls still reach the closed backend client (see
	// Plugin.NewConformanceClient).
	shut   map[uint64]*serverClient
	closed bool
}

// serverClient is one client the host opened, with its leaderships.
type serverClient struct {
	b core.MetadataBackend
	// passThrough: a conformance client (see Plugin.NewConformanceClient).
	passThrough bool

	mu          sync.Mutex
	nextLeader  uint64
	leaderships map[uint64]core.Leadership
	// campaigns are the running campaigns the host named (campaign_id);
	// withdrawn the ids withdrawn before their campaign had started here.
	campaigns map[uint64]*campaignRun
	withdrawn map[uint64]bool
}

// campaignRun is one named campaign in the plugin (see withdraw).
type campaignRun struct {
	cancel context.CancelFunc // ends the backend call's context
	// settled is closed when the backend's Campaign has returned; lead is
	// then the leadership it won, if any.
	settled chan struct{}
	lead    core.Leadership
	// withdrawn: withdraw asked for it.
	withdrawn bool
}

// maxWithdrawn bounds serverClient.withdrawn (ids withdrawn before their
// campaign started, or after it ended, which never come back).
const maxWithdrawn = 1024

func newServer(p core.Provider) *server {
	return &server{provider: p, clients: map[uint64]*serverClient{}, shut: map[uint64]*serverClient{}}
}

// resignTimeout bounds the resignation of a leadership whose host stream
// ended.
const resignTimeout = 5 * time.Second

// lookup returns the open client id names (or a closed pass-through one).
func (s *server) lookup(id uint64) (*serverClient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[id]
	if !ok {
		c, ok = s.shut[id]
	}
	if !ok {
		return nil, fmt.Errorf("%w: plugin client %d is not open", core.ErrClosed, id)
	}
	return c, nil
}

// callCtx returns the context to call the backend with: ctx, or, when
// the host says its caller's context had already ended before the call (a
// pass-through client), a context ended the same way, so that the backend
// answers it. The cancel function must be called.
//
// The one key is looked up without copying the call's metadata
// (metadata.FromIncomingContext copies all of it), which every call of the
// TxnStream paid for nothing: its calls carry the mark in TxnCall.
func callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	switch v := metadata.ValueFromIncomingContext(ctx, mdContextEnded); {
	case len(v) == 0:
		return ctx, func() {}
	case v[0] == "deadline":
		return context.WithDeadline(ctx, time.Unix(0, 0))
	default:
		ended, cancel := context.WithCancel(ctx)
		cancel()
		return ended, cancel
	}
}

// closeAll closes every client (when the plugin stops).
func (s *server) closeAll() {
	s.mu.Lock()
	s.closed = true
	clients := s.clients
	s.clients = map[uint64]*serverClient{}
	s.shut = map[uint64]*serverClient{}
	s.mu.Unlock()
	for _, c := range clients {
		_ = c.b.Close()
	}
}

// The methods of server return the backend's errors as they are: the
// Backend service is registered behind statusUnary and statusStream (see
// registerBackend), which turn them into the wire's status errors. A
// method body therefore says only what it does; the client-scoped ones
// run through handle or handlePart.

// registerBackend registers srv as g's Backend service, each method behind
// statusUnary or statusStream. They are installed here, on the service,
// rather than among the server's options (grpcServerOptions), so that
// every server that serves the plugin has them: go-plugin's in-process
// test server (plugin.TestPluginGRPCConn) is built without those options.
func registerBackend(g *grpc.Server, srv pb.BackendServer) {
	desc := pb.Backend_ServiceDesc // the host's streams use the original
	desc.Methods = slices.Clone(desc.Methods)
	for i := range desc.Methods {
		h := desc.Methods[i].Handler
		desc.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, next grpc.UnaryServerInterceptor) (any, error) {
			if next == nil {
				return h(srv, ctx, dec, statusUnary)
			}
			// statusUnary runs innermost, next to the method.
			return h(srv, ctx, dec, func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
				return next(ctx, req, info, func(ctx context.Context, req any) (any, error) {
					return statusUnary(ctx, req, info, handler)
				})
			})
		}
	}
	desc.Streams = slices.Clone(desc.Streams)
	for i := range desc.Streams {
		d := desc.Streams[i]
		info := &grpc.StreamServerInfo{FullMethod: "/" + desc.ServiceName + "/" + d.StreamName, IsClientStream: d.ClientStreams, IsServerStream: d.ServerStreams}
		desc.Streams[i].Handler = func(srv any, ss grpc.ServerStream) error {
			return statusStream(srv, ss, info, d.Handler)
		}
	}
	g.RegisterService(&desc, srv)
}

// statusUnary turns the error of a Backend method into its status (see
// ToStatus).
func statusUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	return resp, wireStatus(err)
}

// statusStream turns the error of a Backend stream into its status (see
// ToStatus), except the stream's own errors (its Send and Recv), which
// the stream it gives the method marks (see wireError) and which go back
// as they are.
func statusStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return wireStatus(handler(srv, markedStream{ss}))
}

// wireStatus is what a Backend method's error becomes on the wire: a
// wireError's own error as it is, any other through ToStatus.
func wireStatus(err error) error {
	if w, ok := err.(*wireError); ok {
		return w.err
	}
	return ToStatus(err)
}

// wireError is an error of the wire itself (a stream's Send or Recv, the
// end of the stream's context), which the server returns as it is: not a
// backend's error to translate.
type wireError struct{ err error }

func (e *wireError) Error() string { return e.err.Error() }
func (e *wireError) Unwrap() error { return e.err }

// asIs marks err (if any) as the wire's own.
func asIs(err error) error {
	if _, ok := err.(*wireError); ok || err == nil {
		return err
	}
	return &wireError{err}
}

// markedStream marks the errors of its Send and Recv as the wire's own.
type markedStream struct{ grpc.ServerStream }

func (s markedStream) SendMsg(m any) error { return asIs(s.ServerStream.SendMsg(m)) }
func (s markedStream) RecvMsg(m any) error { return asIs(s.ServerStream.RecvMsg(m)) }

// handle runs do for the client clientID names, with the call's context
// (see callCtx).
func handle[Resp any](s *server, ctx context.Context, clientID uint64, do func(context.Context, *serverClient) (Resp, error)) (Resp, error) {
	c, err := s.lookup(clientID)
	if err != nil {
		var zero Resp
		return zero, err
	}
	ctx, done := callCtx(ctx)
	defer done()
	return do(ctx, c)
}

// handlePart is handle for a method of the optional part P of the client's
// backend: a backend without it answers what unsupported says.
func handlePart[P, Resp any](s *server, ctx context.Context, clientID uint64, what part[P], do func(context.Context, P) (Resp, error)) (Resp, error) {
	return handle(s, ctx, clientID, func(ctx context.Context, c *serverClient) (Resp, error) {
		p, err := what.of(c)
		if err != nil {
			var zero Resp
			return zero, err
		}
		return do(ctx, p)
	})
}

// part names the optional part P in the error of a backend without it.
type part[P any] string

// The optional parts the server looks up.
const (
	leases       part[core.LeaseManager]         = "leases (LeaseManager)"
	snapStreams  part[core.SnapshotStreamer]     = "streamed snapshots (SnapshotStreamer)"
	imports      part[core.Importer]             = "bulk import (Importer)"
	membership   part[core.MembershipManager]    = "membership changes (MembershipManager)"
	forceRemoval part[core.ForceRemover]         = "forced membership removals (ForceRemover)"
	transfers    part[core.LeadershipTransferer] = "leadership transfer (LeadershipTransferer)"
	faults       part[core.FaultInjector]        = "fault injection (FaultInjector)"
	expiry       part[core.SessionExpirer]       = "expiring sessions on demand (SessionExpirer)"
)

// of returns c's backend as P, or the error of a backend without it.
func (p part[P]) of(c *serverClient) (P, error) {
	v, ok := core.Optional[P](c.b)
	if !ok {
		return v, unsupported(string(p))
	}
	return v, nil
}

func unsupported(what string) error {
	return fmt.Errorf("%w: backend does not support %s", core.ErrInvalidArgument, what)
}

// ---- provider ----

func (s *server) Describe(ctx context.Context, _ *pb.DescribeRequest) (*pb.DescribeResponse, error) {
	_, compact := s.provider.(core.HistoryCompactor)
	return &pb.DescribeResponse{Descriptor_: descriptorToProto(s.provider.Descriptor()), CompactHistory: compact}, nil
}

// CompactHistory is the test hook of providers that are HistoryCompactors.
func (s *server) CompactHistory(ctx context.Context, req *pb.CompactHistoryRequest) (*pb.CompactHistoryResponse, error) {
	hc, ok := s.provider.(core.HistoryCompactor)
	if !ok {
		return nil, unsupported("compacting the change history on demand (core.HistoryCompactor)")
	}
	return &pb.CompactHistoryResponse{}, hc.CompactHistory(ctx, req.Revision)
}

func (s *server) Start(ctx context.Context, req *pb.StartRequest) (*pb.StartResponse, error) {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: the plugin was already started", core.ErrInvalidArgument)
	}
	s.started = true
	s.mu.Unlock()
	if err := s.provider.Start(ctx, req.Config); err != nil {
		s.mu.Lock()
		s.started = false
		s.mu.Unlock()
		return nil, err
	}
	return &pb.StartResponse{}, nil
}

func (s *server) NewClient(ctx context.Context, req *pb.NewClientRequest) (*pb.NewClientResponse, error) {
	s.mu.Lock()
	started, closed := s.started, s.closed
	s.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: the plugin is stopping", core.ErrClosed)
	}
	if !started {
		return nil, fmt.Errorf("%w: NewClient before Start", core.ErrInvalidArgument)
	}
	b, err := s.provider.NewClient(ctx, core.ClientOptions{
		SessionTimeout: time.Duration(req.SessionTimeoutNanos),
		Name:           req.Name,
	})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = b.Close()
		return nil, fmt.Errorf("%w: the plugin is stopping", core.ErrClosed)
	}
	s.nextID++
	id := s.nextID
	md, _ := metadata.FromIncomingContext(ctx)
	s.clients[id] = &serverClient{b: b, passThrough: len(md.Get(mdPassThrough)) > 0, leaderships: map[uint64]core.Leadership{}, campaigns: map[uint64]*campaignRun{}, withdrawn: map[uint64]bool{}}
	s.mu.Unlock()
	return &pb.NewClientResponse{
		ClientId:     id,
		Capabilities: capabilitiesToProto(b.Capabilities(), interfacesOf(b)),
		Session:      sessionInfoToProto(b.Session()),
	}, nil
}

func (s *server) CloseClient(ctx context.Context, req *pb.CloseClientRequest) (*pb.CloseClientResponse, error) {
	s.mu.Lock()
	c, ok := s.clients[req.ClientId]
	delete(s.clients, req.ClientId)
	if ok && c.passThrough {
		s.shut[req.ClientId] = c
	} else if !ok {
		// A closed pass-through client's backend answers Close again.
		c, ok = s.shut[req.ClientId]
	}
	s.mu.Unlock()
	if ok {
		if err := c.b.Close(); err != nil {
			return nil, err
		}
	}
	return &pb.CloseClientResponse{}, nil
}

// ---- key space ----

func (s *server) GetMany(ctx context.Context, req *pb.GetManyRequest) (*pb.GetManyResponse, error) {
	return handle(s, ctx, req.ClientId, func(ctx context.Context, c *serverClient) (*pb.GetManyResponse, error) {
		res, err := c.b.GetMany(ctx, req.Paths, readOptionsFromProto(req.Options))
		return &pb.GetManyResponse{Results: getResultsToProto(res)}, err
	})
}

func (s *server) Children(ctx context.Context, req *pb.ChildrenRequest) (*pb.ChildrenResponse, error) {
	return handle(s, ctx, req.ClientId, func(ctx context.Context, c *serverClient) (*pb.ChildrenResponse, error) {
		names, st, err := c.b.Children(ctx, req.Path, readOptionsFromProto(req.Options))
		return &pb.ChildrenResponse{Names: names, Stat: statToProto(st)}, err
	})
}

func (s *server) Snapshot(ctx context.Context, req *pb.SnapshotRequest) (*pb.SnapshotResponse, error) {
	return handle(s, ctx, req.ClientId, func(ctx context.Context, c *serverClient) (*pb.SnapshotResponse, error) {
		snap, err := c.b.Snapshot(ctx, req.Prefix)
		return &pb.SnapshotResponse{Revision: snap.Revision, Nodes: nodesToProto(snap.Nodes)}, err
	})
}

// Txn is the unary Txn; TxnStream's calls run txn too.
func (s *server) Txn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	return s.txn(ctx, req)
}

func (s *server) txn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	return handle(s, ctx, req.ClientId, func(ctx context.Context, c *serverClient) (*pb.TxnResponse, error) {
		res, err := c.b.Txn(ctx, opsFromProto(req.Ops), core.TxnOptions{Fence: fenceFromProto(req.Fence)})
		if err != nil {
			return nil, err
		}
		return txnResultToProto(res), nil
	})
}

func (s *server) Watch(req *pb.WatchRequest, stream pb.Backend_WatchServer) error {
	c, err := s.lookup(req.ClientId)
	if err != nil {
		return err
	}
	ch, err := c.b.Watch(stream.Context(), req.Prefix, req.FromRevision)
	if err != nil {
		return err
	}
	if err := stream.Send(&pb.WatchResponse{Started: true}); err != nil {
		return err
	}
	if !req.Parts {
		ch = joinResetPages(stream.Context(), ch)
	}
	return asIs(pumpWatch(stream.Context(), ch, req.Parts, func(m *pb.WatchResponse) error {
		if h := watchMessageHook.Load(); h != nil {
			(*h)(m)
		}
		return stream.Send(m)
	}))
}

// joinResetPages is ch with every Reset that comes in pages
// (core.WatchResponse.Partial) joined into one response: for a host that
// predates the pages (it does not ask for parts, and does not know
// partial). Other responses pass as they are.
func joinResetPages(ctx context.Context, ch <-chan core.WatchResponse) <-chan core.WatchResponse {
	out := make(chan core.WatchResponse)
	go func() {
		defer close(out)
		var pages []core.WatchEvent
		for resp := range ch {
			if resp.Reset && resp.Partial {
				pages = append(pages, resp.Events...)
				continue
			}
			if resp.Reset && pages != nil {
				resp.Events, pages = append(pages, resp.Events...), nil
			}
			select {
			case out <- resp:
			case <-ctx.Done():
				for range ch {
				}
				return
			}
		}
	}()
	return out
}

// Bounds of one coalesced watch message (see pumpWatch): far below any
// gRPC message limit, and few enough events that the host applies one
// message without holding up its readers for long.
const (
	watchMergeEvents = 4096
	watchMergeBytes  = 1 << 20
)

// watchEventOverhead is what pumpWatch counts per event besides its path
// and data (type, revision, stat, framing).
const watchEventOverhead = 64

// watchMessageHook, when set (tests), sees every watch message the server
// sends.
var watchMessageHook atomic.Pointer[func(*pb.WatchResponse)]

// pumpWatch is pump for a watch, coalescing: when the backend has
// delivered more responses than the host has taken, the ones waiting in ch
// are merged into one message, in order, with the last one's revision,
// up to watchMergeEvents events and about watchMergeBytes (a response that
// alone exceeds the bounds goes out alone: whole, or, when the host joins
// parts, in parts within the bounds). A Reset response and an Err
// response are never merged with another: each goes out as it came. So a
// burst of writes crosses the boundary in few messages, and the host (one
// core.WatchResponse per message, or per response sent in parts) applies
// it at once; and no response is bounded by a message's size.
func pumpWatch(ctx context.Context, ch <-chan core.WatchResponse, parts bool, send func(*pb.WatchResponse) error) error {
	var held *core.WatchResponse // taken from ch, not merged: goes out next
	for {
		var resp core.WatchResponse
		if held != nil {
			resp, held = *held, nil
		} else {
			select {
			case v, ok := <-ch:
				if !ok {
					return nil
				}
				resp = v
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if parts && (len(resp.Events) > watchMergeEvents || watchEventsSize(resp.Events) > watchMergeBytes) {
			if err := sendParts(resp, send); err != nil || resp.Err != nil {
				return err
			}
			continue
		}
		m := watchResponseToProto(resp)
		closed := false
		if mergeableWatch(resp) {
			size := watchEventsSize(resp.Events)
		merge:
			for len(m.Events) < watchMergeEvents && size < watchMergeBytes {
				select {
				case v, ok := <-ch:
					if !ok {
						closed = true
						break merge
					}
					vs := watchEventsSize(v.Events)
					if !mergeableWatch(v) || len(m.Events)+len(v.Events) > watchMergeEvents || size+vs > watchMergeBytes {
						held = &v
						break merge
					}
					m.Events = appendWatchEventsToProto(m.Events, v.Events)
					if v.Revision > m.Revision {
						m.Revision = v.Revision
					}
					size += vs
				default:
					break merge
				}
			}
		}
		if err := send(m); err != nil || resp.Err != nil || closed {
			return err
		}
	}
}

// sendParts sends resp as parts within the bounds of one coalesced
// message, each but the last marked more (the host joins them).
func sendParts(resp core.WatchResponse, send func(*pb.WatchResponse) error) error {
	evs := resp.Events
	for len(evs) > 0 {
		n, size := 0, 0
		for n < len(evs) && n < watchMergeEvents {
			es := watchEventSize(evs[n])
			if n > 0 && size+es > watchMergeBytes {
				break
			}
			n, size = n+1, size+es
		}
		m := &pb.WatchResponse{Reset_: resp.Reset, Partial: resp.Partial, Revision: resp.Revision, More: n < len(evs)}
		m.Events = appendWatchEventsToProto(nil, evs[:n])
		if !m.More {
			m.Error = ErrorToProto(resp.Err)
		}
		if err := send(m); err != nil {
			return err
		}
		evs = evs[n:]
	}
	return nil
}

// mergeableWatch: r may be merged with its neighbours (an ordinary batch
// of changes, not a reset or the final error).
func mergeableWatch(r core.WatchResponse) bool { return !r.Reset && r.Err == nil }

// watchEventsSize estimates the wire size of evs.
func watchEventsSize(evs []core.WatchEvent) int {
	n := 0
	for _, e := range evs {
		n += watchEventSize(e)
	}
	return n
}

// watchEventSize is what pumpWatch counts for one event.
func watchEventSize(e core.WatchEvent) int { return len(e.Path) + len(e.Data) + watchEventOverhead }

func (s *server) Session(ctx context.Context, req *pb.SessionRequest) (*pb.SessionResponse, error) {
	return handle(s, ctx, req.ClientId, func(_ context.Context, c *serverClient) (*pb.SessionResponse, error) {
		return &pb.SessionResponse{Session: sessionInfoToProto(c.b.Session())}, nil
	})
}

func (s *server) SessionEvents(req *pb.SessionEventsRequest, stream pb.Backend_SessionEventsServer) error {
	c, err := s.lookup(req.ClientId)
	if err != nil {
		return err
	}
	ch, err := c.b.SessionEvents(stream.Context())
	if err != nil {
		return err
	}
	if err := stream.Send(&pb.SessionEventsResponse{Started: true, Session: sessionInfoToProto(c.b.Session())}); err != nil {
		return err
	}
	return asIs(pump(stream.Context(), ch, func(ev core.SessionEvent) (bool, error) {
		return false, stream.Send(&pb.SessionEventsResponse{
			State:     pb.SessionState(ev.State),
			SessionId: ev.SessionID,
			Session:   sessionInfoToProto(c.b.Session()),
		})
	}))
}

// Campaign campaigns with the stream's context (cancelled by the host before
// election: the candidacy is withdrawn), then holds the leadership until it
// is lost (sending lost=true) or the host ends the stream (resigning).
func (s *server) Campaign(req *pb.CampaignRequest, stream pb.Backend_CampaignServer) error {
	c, err := s.lookup(req.ClientId)
	if err != nil {
		return err
	}
	cand := core.Candidate{ID: req.GetCandidate().GetId(), Address: req.GetCandidate().GetAddress()}
	cctx, done := callCtx(stream.Context())
	defer done()
	run := &campaignRun{settled: make(chan struct{})}
	cctx, run.cancel = context.WithCancel(cctx)
	defer run.cancel()
	if id := req.CampaignId; id != 0 {
		c.mu.Lock()
		if c.withdrawn[id] {
			delete(c.withdrawn, id)
			run.withdrawn = true
			run.cancel()
		}
		c.campaigns[id] = run
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			delete(c.campaigns, id)
			c.mu.Unlock()
		}()
	}
	l, err := c.b.Campaign(cctx, cand)
	c.mu.Lock()
	run.lead = l
	withdrawn := run.withdrawn
	c.mu.Unlock()
	close(run.settled)
	if err != nil {
		return err
	}
	if withdrawn {
		// Withdrawn just as it was won: give the leadership up.
		s.resign(l)
		return fmt.Errorf("campaign withdrawn: %w", context.Canceled)
	}
	c.mu.Lock()
	c.nextLeader++
	id := c.nextLeader
	c.leaderships[id] = l
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.leaderships, id)
		c.mu.Unlock()
	}()
	if err := stream.Send(&pb.CampaignResponse{LeadershipId: id, Epoch: l.Epoch(), Fence: fenceToProto(l.Fence())}); err != nil {
		s.resign(l)
		return err
	}
	select {
	case <-l.Lost():
		return stream.Send(&pb.CampaignResponse{LeadershipId: id, Lost: true})
	case <-stream.Context().Done():
		s.resign(l)
		return asIs(stream.Context().Err())
	}
}

func (s *server) resign(l core.Leadership) {
	ctx, cancel := context.WithTimeout(context.Background(), resignTimeout)
	defer cancel()
	_ = l.Resign(ctx)
}

func (s *server) Resign(ctx context.Context, req *pb.ResignRequest) (*pb.ResignResponse, error) {
	return handle(s, ctx, req.ClientId, func(ctx context.Context, c *serverClient) (*pb.ResignResponse, error) {
		if req.CampaignId != 0 {
			return &pb.ResignResponse{}, s.withdraw(ctx, c, req.CampaignId)
		}
		c.mu.Lock()
		l, ok := c.leaderships[req.LeadershipId]
		c.mu.Unlock()
		if !ok {
			// Already lost and forgotten: resigning is idempotent.
			return &pb.ResignResponse{}, nil
		}
		return &pb.ResignResponse{}, l.Resign(ctx)
	})
}

// withdraw withdraws c's campaign id: its backend call's context ends, and
// once the backend's Campaign has returned a leadership won at that moment
// is resigned. A campaign not started yet is refused when it starts; one
// already over needs nothing.
func (s *server) withdraw(ctx context.Context, c *serverClient, id uint64) error {
	c.mu.Lock()
	run, ok := c.campaigns[id]
	if ok {
		run.withdrawn = true
	} else {
		if len(c.withdrawn) >= maxWithdrawn {
			c.withdrawn = map[uint64]bool{}
		}
		c.withdrawn[id] = true
	}
	c.mu.Unlock()
	if !ok {
		return nil
	}
	run.cancel()
	select {
	case <-run.settled:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.mu.Lock()
	l := run.lead
	c.mu.Unlock()
	if l != nil {
		s.resign(l)
	}
	return nil
}

func (s *server) Leader(ctx context.Context, req *pb.LeaderRequest) (*pb.LeaderResponse, error) {
	return handle(s, ctx, req.ClientId, func(ctx context.Context, c *serverClient) (*pb.LeaderResponse, error) {
		l, err := c.b.Leader(ctx)
		return &pb.LeaderResponse{Leader: leaderToProto(l)}, err
	})
}

func (s *server) ObserveLeader(req *pb.ObserveLeaderRequest, stream pb.Backend_ObserveLeaderServer) error {
	c, err := s.lookup(req.ClientId)
	if err != nil {
		return err
	}
	ch, err := c.b.ObserveLeader(stream.Context())
	if err != nil {
		return err
	}
	if err := stream.Send(&pb.ObserveLeaderResponse{Started: true}); err != nil {
		return err
	}
	return asIs(pump(stream.Context(), ch, func(l core.LeaderInfo) (bool, error) {
		return false, stream.Send(&pb.ObserveLeaderResponse{Leader: leaderToProto(l)})
	}))
}

func (s *server) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	return handle(s, ctx, req.ClientId, func(ctx context.Context, c *serverClient) (*pb.StatusResponse, error) {
		st, err := c.b.Status(ctx)
		return statusToProto(st), err
	})
}

// ---- optional parts ----

func (s *server) GrantLease(ctx context.Context, req *pb.GrantLeaseRequest) (*pb.GrantLeaseResponse, error) {
	return handlePart(s, ctx, req.ClientId, leases, func(ctx context.Context, lm core.LeaseManager) (*pb.GrantLeaseResponse, error) {
		id, err := lm.GrantLease(ctx, req.Owner, time.Duration(req.TtlNanos), fenceFromProto(req.Fence))
		return &pb.GrantLeaseResponse{LeaseId: id}, err
	})
}

func (s *server) RenewLease(ctx context.Context, req *pb.RenewLeaseRequest) (*pb.RenewLeaseResponse, error) {
	return handlePart(s, ctx, req.ClientId, leases, func(ctx context.Context, lm core.LeaseManager) (*pb.RenewLeaseResponse, error) {
		return &pb.RenewLeaseResponse{}, lm.RenewLease(ctx, req.LeaseId)
	})
}

func (s *server) RevokeLease(ctx context.Context, req *pb.RevokeLeaseRequest) (*pb.RevokeLeaseResponse, error) {
	return handlePart(s, ctx, req.ClientId, leases, func(ctx context.Context, lm core.LeaseManager) (*pb.RevokeLeaseResponse, error) {
		return &pb.RevokeLeaseResponse{}, lm.RevokeLease(ctx, req.LeaseId, fenceFromProto(req.Fence))
	})
}

// SnapshotStream sends the backend's snapshot a page at a time as its
// SnapshotStreamer reads it, each page once the host has asked for it (the
// first request, then one more per page): the plugin holds one page, not
// the tree, and reads no further than its consumer.
func (s *server) SnapshotStream(stream pb.Backend_SnapshotStreamServer) error {
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	c, err := s.lookup(req.ClientId)
	if err != nil {
		return err
	}
	ss, err := snapStreams.of(c)
	if err != nil {
		return err
	}
	// A failure of the stream's own that the backend returns as it is
	// goes back as it is (it comes marked, see statusStream).
	first := true
	return ss.StreamSnapshot(stream.Context(), req.Prefix, int(req.PageBytes), func(rev int64, nodes []core.Node) error {
		if !first {
			// The host asks for each page after the first.
			if _, err := stream.Recv(); err != nil {
				return err
			}
		}
		first = false
		return stream.Send(&pb.SnapshotResponse{Revision: rev, Nodes: nodesToProto(nodes)})
	})
}

func (s *server) Import(ctx context.Context, req *pb.ImportRequest) (*pb.ImportResponse, error) {
	return handlePart(s, ctx, req.ClientId, imports, func(ctx context.Context, im core.Importer) (*pb.ImportResponse, error) {
		return &pb.ImportResponse{}, im.Import(ctx, importNodesFromProto(req.Nodes), fenceFromProto(req.Fence))
	})
}

func (s *server) AllocateIDs(ctx context.Context, req *pb.AllocateIDsRequest) (*pb.AllocateIDsResponse, error) {
	return handle(s, ctx, req.ClientId, func(ctx context.Context, c *serverClient) (*pb.AllocateIDsResponse, error) {
		// core.AllocateIDs uses the backend's IDAllocator when it has one
		// and the compare-and-set loop otherwise, next to the data.
		first, err := core.AllocateIDs(ctx, c.b, req.Path, req.Count, fenceFromProto(req.Fence))
		return &pb.AllocateIDsResponse{First: first}, err
	})
}

func (s *server) AddVoter(ctx context.Context, req *pb.AddVoterRequest) (*pb.AddVoterResponse, error) {
	return handlePart(s, ctx, req.ClientId, membership, func(ctx context.Context, mm core.MembershipManager) (*pb.AddVoterResponse, error) {
		return &pb.AddVoterResponse{}, mm.AddVoter(ctx, req.Id, req.Address)
	})
}

func (s *server) TransferLeadership(ctx context.Context, req *pb.TransferLeadershipRequest) (*pb.TransferLeadershipResponse, error) {
	return handlePart(s, ctx, req.ClientId, transfers, func(ctx context.Context, lt core.LeadershipTransferer) (*pb.TransferLeadershipResponse, error) {
		r, err := lt.TransferLeadership(ctx, req.To)
		return &pb.TransferLeadershipResponse{MemberId: r.MemberID, Term: r.Term}, err
	})
}

func (s *server) RemoveVoter(ctx context.Context, req *pb.RemoveVoterRequest) (*pb.RemoveVoterResponse, error) {
	return handle(s, ctx, req.ClientId, func(ctx context.Context, c *serverClient) (*pb.RemoveVoterResponse, error) {
		mm, err := membership.of(c)
		if err != nil {
			return nil, err
		}
		remove := mm.RemoveVoter
		if req.Force {
			fr, err := forceRemoval.of(c)
			if err != nil {
				return nil, err
			}
			remove = fr.ForceRemoveVoter
		}
		return &pb.RemoveVoterResponse{}, remove(ctx, req.Id)
	})
}

func (s *server) FailNextWrite(ctx context.Context, req *pb.FailNextWriteRequest) (*pb.FailNextWriteResponse, error) {
	return handlePart(s, ctx, req.ClientId, faults, func(_ context.Context, fi core.FaultInjector) (*pb.FailNextWriteResponse, error) {
		e := ErrorFromProto(req.Error)
		if e == nil {
			e = fmt.Errorf("%w: injected failure", core.ErrUnavailable)
		}
		fi.FailNextWrite(e)
		return &pb.FailNextWriteResponse{}, nil
	})
}

func (s *server) SetLatency(ctx context.Context, req *pb.SetLatencyRequest) (*pb.SetLatencyResponse, error) {
	return handlePart(s, ctx, req.ClientId, faults, func(_ context.Context, fi core.FaultInjector) (*pb.SetLatencyResponse, error) {
		fi.SetLatency(time.Duration(req.LatencyNanos))
		return &pb.SetLatencyResponse{}, nil
	})
}

func (s *server) ExpireSession(ctx context.Context, req *pb.ExpireSessionRequest) (*pb.ExpireSessionResponse, error) {
	return handlePart(s, ctx, req.ClientId, expiry, func(ctx context.Context, se core.SessionExpirer) (*pb.ExpireSessionResponse, error) {
		return &pb.ExpireSessionResponse{}, se.ExpireSession(ctx)
	})
}

// pump forwards what a backend channel delivers to a server stream until the
// channel closes (nil), send fails or reports the item as the last one, or
// the host ends the stream (its context error: the handler does not depend
// on the backend closing ch).
func pump[T any](ctx context.Context, ch <-chan T, send func(T) (last bool, err error)) error {
	for {
		select {
		case v, ok := <-ch:
			if !ok {
				return nil
			}
			last, err := send(v)
			if err != nil || last {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
