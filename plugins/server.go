package plugins

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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

func (s *server) client(id uint64) (*serverClient, error) {
	c, err := s.lookup(id)
	return c, ToStatus(err)
}

// lookup is client with the backend's error (not yet a status).
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

func unsupported(what string) error {
	return ToStatus(fmt.Errorf("%w: backend does not support %s", core.ErrInvalidArgument, what))
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
	if err := hc.CompactHistory(ctx, req.Revision); err != nil {
		return nil, ToStatus(err)
	}
	return &pb.CompactHistoryResponse{}, nil
}

func (s *server) Start(ctx context.Context, req *pb.StartRequest) (*pb.StartResponse, error) {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return nil, ToStatus(fmt.Errorf("%w: the plugin was already started", core.ErrInvalidArgument))
	}
	s.started = true
	s.mu.Unlock()
	if err := s.provider.Start(ctx, req.Config); err != nil {
		s.mu.Lock()
		s.started = false
		s.mu.Unlock()
		return nil, ToStatus(err)
	}
	return &pb.StartResponse{}, nil
}

func (s *server) NewClient(ctx context.Context, req *pb.NewClientRequest) (*pb.NewClientResponse, error) {
	s.mu.Lock()
	started, closed := s.started, s.closed
	s.mu.Unlock()
	if closed {
		return nil, ToStatus(fmt.Errorf("%w: the plugin is stopping", core.ErrClosed))
	}
	if !started {
		return nil, ToStatus(fmt.Errorf("%w: NewClient before Start", core.ErrInvalidArgument))
	}
	b, err := s.provider.NewClient(ctx, core.ClientOptions{
		SessionTimeout: time.Duration(req.SessionTimeoutNanos),
		Name:           req.Name,
	})
	if err != nil {
		return nil, ToStatus(err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = b.Close()
		return nil, ToStatus(fmt.Errorf("%w: the plugin is stopping", core.ErrClosed))
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
			return nil, ToStatus(err)
		}
	}
	return &pb.CloseClientResponse{}, nil
}

// ---- key space ----

func (s *server) GetMany(ctx context.Context, req *pb.GetManyRequest) (*pb.GetManyResponse, error) {
	c, err := s.client(req.ClientId)
	if err != nil {
		return nil, err
	}
	ctx, done := callCtx(ctx)
	defer done()
	res, err := c.b.GetMany(ctx, req.Paths, readOptionsFromProto(req.Options))
	if err != nil {
		return nil, ToStatus(err)
	}
	return &pb.GetManyResponse{Results: getResultsToProto(res)}, nil
}

func (s *server) Children(ctx context.Context, req *pb.ChildrenRequest) (*pb.ChildrenResponse, error) {
	c, err := s.client(req.ClientId)
	if err != nil {
		return nil, err
	}
	ctx, done := callCtx(ctx)
	defer done()
	names, st, err := c.b.Children(ctx, req.Path, readOptionsFromProto(req.Options))
	if err != nil {
		return nil, ToStatus(err)
	}
	return &pb.ChildrenResponse{Names: names, Stat: statToProto(st)}, nil
}

func (s *server) Snapshot(ctx context.Context, req *pb.SnapshotRequest) (*pb.SnapshotResponse, error) {
	c, err := s.client(req.ClientId)
	if err != nil {
		return nil, err
	}
	ctx, done := callCtx(ctx)
	defer done()
	snap, err := c.b.Snapshot(ctx, req.Prefix)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &pb.SnapshotResponse{Revision: snap.Revision, Nodes: nodesToProto(snap.Nodes)}, nil
}

func (s *server) Txn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	resp, err := s.txn(ctx, req)
	if err != nil {
		return nil, ToStatus(err)
	}
	return resp, nil
}

// txn is Txn (unary and on TxnStream) with the backend's error, not yet
// a status.
func (s *server) txn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	c, err := s.lookup(req.ClientId)
	if err != nil {
		return nil, err
	}
	ctx, done := callCtx(ctx)
	defer done()
	res, err := c.b.Txn(ctx, opsFromProto(req.Ops), core.TxnOptions{Fence: fenceFromProto(req.Fence)})
	if err != nil {
		return nil, err
	}
	return txnResultToProto(res), nil
}

func (s *server) Watch(req *pb.WatchRequest, stream pb.Backend_WatchServer) error {
	c, err := s.client(req.ClientId)
	if err != nil {
		return err
	}
	ch, err := c.b.Watch(stream.Context(), req.Prefix, req.FromRevision)
	if err != nil {
		return ToStatus(err)
	}
	if err := stream.Send(&pb.WatchResponse{Started: true}); err != nil {
		return err
	}
	return pumpWatch(stream.Context(), ch, func(m *pb.WatchResponse) error {
		if h := watchMessageHook.Load(); h != nil {
			(*h)(m)
		}
		return stream.Send(m)
	})
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
// alone exceeds the bounds goes out alone). A Reset response and an Err
// response are never merged with another: each goes out as it came. So a
// burst of writes crosses the boundary in few messages, and the host (one
// core.WatchResponse per message) applies it at once.
func pumpWatch(ctx context.Context, ch <-chan core.WatchResponse, send func(*pb.WatchResponse) error) error {
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

// mergeableWatch: r may be merged with its neighbours (an ordinary batch
// of changes, not a reset or the final error).
func mergeableWatch(r core.WatchResponse) bool { return !r.Reset && r.Err == nil }

// watchEventsSize estimates the wire size of evs.
func watchEventsSize(evs []core.WatchEvent) int {
	n := 0
	for _, e := range evs {
		n += len(e.Path) + len(e.Data) + watchEventOverhead
	}
	return n
}

func (s *server) Session(ctx context.Context, req *pb.SessionRequest) (*pb.SessionResponse, error) {
	c, err := s.client(req.ClientId)
	if err != nil {
		return nil, err
	}
	return &pb.SessionResponse{Session: sessionInfoToProto(c.b.Session())}, nil
}

func (s *server) SessionEvents(req *pb.SessionEventsRequest, stream pb.Backend_SessionEventsServer) error {
	c, err := s.client(req.ClientId)
	if err != nil {
		return err
	}
	ch, err := c.b.SessionEvents(stream.Context())
	if err != nil {
		return ToStatus(err)
	}
	if err := stream.Send(&pb.SessionEventsResponse{Started: true, Session: sessionInfoToProto(c.b.Session())}); err != nil {
		return err
	}
	return pump(stream.Context(), ch, func(ev core.SessionEvent) (bool, error) {
		return false, stream.Send(&pb.SessionEventsResponse{
			State:     pb.SessionState(ev.State),
			SessionId: ev.SessionID,
			Session:   sessionInfoToProto(c.b.Session()),
		})
	})
}

// Campaign campaigns with the stream's context (cancelled by the host before
// election: the candidacy is withdrawn), then holds the leadership until it
// is lost (sending lost=true) or the host ends the stream (resigning).
func (s *server) Campaign(req *pb.CampaignRequest, stream pb.Backend_CampaignServer) error {
	c, err := s.client(req.ClientId)
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
		return ToStatus(err)
	}
	if withdrawn {
		// Withdrawn just as it was won: give the leadership up.
		s.resign(l)
		return ToStatus(fmt.Errorf("campaign withdrawn: %w", context.Canceled))
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
		return stream.Context().Err()
	}
}

func (s *server) resign(l core.Leadership) {
	ctx, cancel := context.WithTimeout(context.Background(), resignTimeout)
	defer cancel()
	_ = l.Resign(ctx)
}

func (s *server) Resign(ctx context.Context, req *pb.ResignRequest) (*pb.ResignResponse, error) {
	c, err := s.client(req.ClientId)
	if err != nil {
		return nil, err
	}
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
	if err := l.Resign(ctx); err != nil {
		return nil, ToStatus(err)
	}
	return &pb.ResignResponse{}, nil
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
		return ToStatus(ctx.Err())
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
	c, err := s.client(req.ClientId)
	if err != nil {
		return nil, err
	}
	ctx, done := callCtx(ctx)
	defer done()
	l, err := c.b.Leader(ctx)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &pb.LeaderResponse{Leader: leaderToProto(l)}, nil
}

func (s *server) ObserveLeader(req *pb.ObserveLeaderRequest, stream pb.Backend_ObserveLeaderServer) error {
	c, err := s.client(req.ClientId)
	if err != nil {
		return err
	}
	ch, err := c.b.ObserveLeader(stream.Context())
	if err != nil {
		return ToStatus(err)
	}
	if err := stream.Send(&pb.ObserveLeaderResponse{Started: true}); err != nil {
		return err
	}
	return pump(stream.Context(), ch, func(l core.LeaderInfo) (bool, error) {
		return false, stream.Send(&pb.ObserveLeaderResponse{Leader: leaderToProto(l)})
	})
}

func (s *server) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	c, err := s.client(req.ClientId)
	if err != nil {
		return nil, err
	}
	ctx, done := callCtx(ctx)
	defer done()
	st, err := c.b.Status(ctx)
	if err != nil {
		return nil, ToStatus(err)
	}
	return statusToProto(st), nil
}

// ---- optional parts ----

func (s *server) GrantLease(ctx context.Context, req *pb.GrantLeaseRequest) (*pb.GrantLeaseResponse, error) {
	c, err := s.client(req.ClientId)
	if err != nil {
		return nil, err
	}
	ctx, done := callCtx(ctx)
	defer done()
	lm, ok := core.Optional[core.LeaseManager](c.b)
	if !ok {
		return nil, unsupported("leases (LeaseManager)")
	}
	id, err := lm.GrantLease(ctx, req.Owner, time.Duration(req.TtlNanos), fenceFromProto(req.Fence))
	if err != nil {
		return nil, ToStatus(err)
	}
	return &pb.GrantLeaseResponse{LeaseId: id}, nil
}

func (s *server) RenewLease(ctx context.Context, req *pb.RenewLeaseRequest) (*pb.RenewLeaseResponse, error) {
	c, err := s.client(req.ClientId)
	if err != nil {
		return nil, err
	}
	ctx, done := callCtx(ctx)
	defer done()
	lm, ok := core.Optional[core.LeaseManager](c.b)
	if !ok {
		return nil, unsupported("leases (LeaseManager)")
	}
	if err := lm.RenewLease(ctx, req.LeaseId); err != nil {
		return nil, ToStatus(err)
	}
	return &pb.RenewLeaseResponse{}, nil
}

func (s *server) RevokeLease(ctx context.Context, req *pb.RevokeLeaseRequest) (*pb.RevokeLeaseResponse, error) {
	c, err := s.client(req.ClientId)
	if err != nil {
		return nil, err
	}
	ctx, done := callCtx(ctx)
	defer done()
	lm, ok := core.Optional[core.LeaseManager](c.b)
	if !ok {
		return nil, unsupported("leases (LeaseManager)")
	}
	if err := lm.RevokeLease(ctx, req.LeaseId, fenceFromProto(req.Fence)); err != nil {
		return nil, ToStatus(err)
	}
	return &pb.RevokeLeaseResponse{}, nil
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
	c, err := s.client(req.ClientId)
	if err != nil {
		return err
	}
	ss, ok := core.Optional[core.SnapshotStreamer](c.b)
	if !ok {
		return unsupported("streamed snapshots (SnapshotStreamer)")
	}
	var wireErr error // the stream's own failure, returned as it is
	first := true
	err = ss.StreamSnapshot(stream.Context(), req.Prefix, int(req.PageBytes), func(rev int64, nodes []core.Node) error {
		if !first {
			// The host asks for each page after the first.
			if _, wireErr = stream.Recv(); wireErr != nil {
				return wireErr
			}
		}
		first = false
		wireErr = stream.Send(&pb.SnapshotResponse{Revision: rev, Nodes: nodesToProto(nodes)})
		return wireErr
	})
	if err != nil && err == wireErr {
		return err
	}
	return ToStatus(err)
}

func (s *server) Import(ctx context.Context, req *pb.ImportRequest) (*pb.ImportResponse, error) {
	c, err := s.client(req.ClientId)
	if err != nil {
		return nil, err
	}
	ctx, done := callCtx(ctx)
	defer done()
	im, ok := core.Optional[core.Importer](c.b)
	if !ok {
		return nil, unsupported("bulk import (Importer)")
	}
	if err := im.Import(ctx, importNodesFromProto(req.Nodes), fenceFromProto(req.Fence)); err != nil {
		return nil, ToStatus(err)
	}
	return &pb.ImportResponse{}, nil
}

func (s *server) AllocateIDs(ctx context.Context, req *pb.AllocateIDsRequest) (*pb.AllocateIDsResponse, error) {
	c, err := s.client(req.ClientId)
	if err != nil {
		return nil, err
	}
	ctx, done := callCtx(ctx)
	defer done()
	// core.AllocateIDs uses the backend's IDAllocator when it has one and
	// the compare-and-set loop otherwise, next to the data.
	first, err := core.AllocateIDs(ctx, c.b, req.Path, req.Count, fenceFromProto(req.Fence))
	if err != nil {
		return nil, ToStatus(err)
	}
	return &pb.AllocateIDsResponse{First: first}, nil
}

func (s *server) AddVoter(ctx context.Context, req *pb.AddVoterRequest) (*pb.AddVoterResponse, error) {
	c, err := s.client(req.ClientId)
	if err != nil {
		return nil, err
	}
	ctx, done := callCtx(ctx)
	defer done()
	mm, ok := core.Optional[core.MembershipManager](c.b)
	if !ok {
		return nil, unsupported("membership changes (MembershipManager)")
	}
	if err := mm.AddVoter(ctx, req.Id, req.Address); err != nil {
		return nil, ToStatus(err)
	}
	return &pb.AddVoterResponse{}, nil
}

func (s *server) TransferLeadership(ctx context.Context, req *pb.TransferLeadershipRequest) (*pb.TransferLeadershipResponse, error) {
	c, err := s.client(req.ClientId)
	if err != nil {
		return nil, err
	}
	ctx, done := callCtx(ctx)
	defer done()
	lt, ok := core.Optional[core.LeadershipTransferer](c.b)
	if !ok {
		return nil, unsupported("leadership transfer (LeadershipTransferer)")
	}
	r, err := lt.TransferLeadership(ctx, req.To)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &pb.TransferLeadershipResponse{MemberId: r.MemberID, Term: r.Term}, nil
}

func (s *server) RemoveVoter(ctx context.Context, req *pb.RemoveVoterRequest) (*pb.RemoveVoterResponse, error) {
	c, err := s.client(req.ClientId)
	if err != nil {
		return nil, err
	}
	ctx, done := callCtx(ctx)
	defer done()
	mm, ok := core.Optional[core.MembershipManager](c.b)
	if !ok {
		return nil, unsupported("membership changes (MembershipManager)")
	}
	remove := mm.RemoveVoter
	if req.Force {
		fr, ok := core.Optional[core.ForceRemover](c.b)
		if !ok {
			return nil, unsupported("forced membership removals (ForceRemover)")
		}
		remove = fr.ForceRemoveVoter
	}
	if err := remove(ctx, req.Id); err != nil {
		return nil, ToStatus(err)
	}
	return &pb.RemoveVoterResponse{}, nil
}

func (s *server) FailNextWrite(ctx context.Context, req *pb.FailNextWriteRequest) (*pb.FailNextWriteResponse, error) {
	c, err := s.client(req.ClientId)
	if err != nil {
		return nil, err
	}
	fi, ok := core.Optional[core.FaultInjector](c.b)
	if !ok {
		return nil, unsupported("fault injection (FaultInjector)")
	}
	e := ErrorFromProto(req.Error)
	if e == nil {
		e = fmt.Errorf("%w: injected failure", core.ErrUnavailable)
	}
	fi.FailNextWrite(e)
	return &pb.FailNextWriteResponse{}, nil
}

func (s *server) SetLatency(ctx context.Context, req *pb.SetLatencyRequest) (*pb.SetLatencyResponse, error) {
	c, err := s.client(req.ClientId)
	if err != nil {
		return nil, err
	}
	fi, ok := core.Optional[core.FaultInjector](c.b)
	if !ok {
		return nil, unsupported("fault injection (FaultInjector)")
	}
	fi.SetLatency(time.Duration(req.LatencyNanos))
	return &pb.SetLatencyResponse{}, nil
}

func (s *server) ExpireSession(ctx context.Context, req *pb.ExpireSessionRequest) (*pb.ExpireSessionResponse, error) {
	c, err := s.client(req.ClientId)
	if err != nil {
		return nil, err
	}
	ctx, done := callCtx(ctx)
	defer done()
	se, ok := core.Optional[core.SessionExpirer](c.b)
	if !ok {
		return nil, unsupported("expiring sessions on demand (SessionExpirer)")
	}
	if err := se.ExpireSession(ctx); err != nil {
		return nil, ToStatus(err)
	}
	return &pb.ExpireSessionResponse{}, nil
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
