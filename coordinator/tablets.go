package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// tabletServerService implements the private tablet-server RPCs. They are
// served only on backends with leases and exact history (Raft, and the
// memory backend in tests); on the ZooKeeper backend tablet servers keep
// their own ZooKeeper sessions, and these RPCs answer UNIMPLEMENTED.
type tabletServerService struct {
	adminv1.UnimplementedTabletServerServiceServer
	s *Server
}

// tabletRPCsServed says whether b serves the tablet-server RPCs (it
// declares that tablet servers follow it through the coordinator, with
// leases and exact history), and why not.
func tabletRPCsServed(b core.MetadataBackend) error {
	caps := b.Capabilities()
	if caps.TabletServers != core.TabletServersThroughCoordinator {
		return status.Errorf(codes.Unimplemented, "the tablet-server RPCs are not served on backend %q: tablet servers follow it directly (their own session and ephemeral /tabletservers/ids/<id>)", caps.Name)
	}
	if _, ok := core.Optional[core.LeaseManager](b); !ok || !caps.ExactHistory {
		return status.Errorf(codes.Unimplemented, "the tablet-server RPCs need a backend with leases and exact history; backend %q has leases=%v, exact history=%v",
			caps.Name, ok, caps.ExactHistory)
	}
	return nil
}

func (t *tabletServerService) leader() (*leaderState, error) {
	l, err := t.s.serving()
	if err != nil {
		// A ZooKeeper standby still says UNIMPLEMENTED rather than
		// redirecting to a leader that will refuse too.
		if ref := t.s.backend.Load(); ref != nil {
			if uerr := tabletRPCsServed(ref.b); uerr != nil {
				return nil, uerr
			}
		}
		return nil, err
	}
	if err := tabletRPCsServed(l.b); err != nil {
		return nil, err
	}
	return l, nil
}

// RegisterTabletServer grants a lease and creates the tablet server's
// ephemeral registration on it (replacing an earlier registration of the
// same id, whose lease is revoked).
func (t *tabletServerService) RegisterTabletServer(ctx context.Context, r *adminv1.RegisterTabletServerRequest) (*adminv1.RegisterTabletServerResponse, error) {
	l, err := t.leader()
	if err != nil {
		return nil, err
	}
	if r.ServerId < 0 {
		return nil, &adminapi.FieldError{Field: "server_id",
			Err: fmt.Errorf("%w: tablet server id %d is negative", core.ErrInvalidArgument, r.ServerId)}
	}
	if r.Listeners == "" {
		return nil, &adminapi.FieldError{Field: "listeners",
			Err: fmt.Errorf("%w: tablet server %d: listeners are required", core.ErrInvalidArgument, r.ServerId)}
	}
	lm, _ := core.Optional[core.LeaseManager](l.b) // present: tabletRPCsServed
	ttl := t.s.opts.TabletServerSessionTimeout
	var lease int64
	err = t.s.metrics.timeCall("GrantLease", func() (err error) {
		lease, err = lm.GrantLease(ctx, fmt.Sprintf("tablet-server-%d", r.ServerId), ttl, l.lead.Fence())
		return err
	})
	if err != nil {
		return nil, err
	}
	reg := catalog.TabletServerRegistration{Listeners: r.Listeners, RegisterTimestamp: time.Now().UnixMilli(),
		Rack: r.Rack, CPUCores: r.CpuCores, MemoryBytes: r.MemoryBytes}
	path := catalog.TabletServerPath(r.ServerId)
	for attempt := 0; attempt < 5; attempt++ {
		var ops []core.Op
		old, exists, err := core.Exists(ctx, l.b, path)
		if err != nil {
			return nil, err
		}
		if exists {
			ops = append(ops, core.DeleteOp(path, old.Version))
		}
		create := core.CreateOp(path, reg.Marshal(), core.Ephemeral).WithParents()
		create.Lease = lease
		ops = append(ops, create)
		res, err := l.b.Txn(ctx, ops, core.TxnOptions{Fence: l.lead.Fence()})
		if err != nil && core.FailedOpIndex(err) >= 0 && (errors.Is(err, core.ErrNotFound) || errors.Is(err, core.ErrBadVersion) || errors.Is(err, core.ErrNodeExists)) {
			continue // raced with the old registration's expiry
		}
		if err != nil {
			lm.RevokeLease(context.WithoutCancel(ctx), lease, l.lead.Fence())
			return nil, err
		}
		l.img.ApplyWrite(ops, res)
		if exists && old.EphemeralOwner != 0 && old.EphemeralOwner != lease {
			lm.RevokeLease(ctx, old.EphemeralOwner, l.lead.Fence()) // best effort: it may be gone already
		}
		t.s.mu.Lock()
		t.s.leases[r.ServerId] = lease
		t.s.mu.Unlock()
		t.s.log.Info("tablet server registered", "id", r.ServerId, "lease", lease, "listeners", r.Listeners)
		return &adminv1.RegisterTabletServerResponse{LeaseId: lease, SessionTimeoutMs: ttl.Milliseconds(),
			CoordinatorEpoch: l.lead.Epoch()}, nil
	}
	lm.RevokeLease(context.WithoutCancel(ctx), lease, l.lead.Fence())
	return nil, fmt.Errorf("%w: tablet server %d: registration kept changing; retry", core.ErrUnavailable, r.ServerId)
}

// TabletServerHeartbeat renews a tablet server's lease.
func (t *tabletServerService) TabletServerHeartbeat(ctx context.Context, r *adminv1.TabletServerHeartbeatRequest) (*adminv1.TabletServerHeartbeatResponse, error) {
	l, err := t.leader()
	if err != nil {
		return nil, err
	}
	lm, _ := core.Optional[core.LeaseManager](l.b) // present: tabletRPCsServed
	if err := t.s.metrics.timeCall("RenewLease", func() error { return lm.RenewLease(ctx, r.LeaseId) }); err != nil {
		return nil, fmt.Errorf("tablet server %d lease %d: %w", r.ServerId, r.LeaseId, err)
	}
	return &adminv1.TabletServerHeartbeatResponse{CoordinatorEpoch: l.lead.Epoch()}, nil
}

// streamBackend is the backend the metadata stream is served from: the
// leader's client, or on a standby its own client, whose replica applies
// the same log (FETCH_METADATA and FETCH_METADATA_SNAPSHOT are served by
// every coordinator; registration and heartbeats by the leader only).
// Without an open client it answers NOT_LEADER with the leader's address.
func (t *tabletServerService) streamBackend() (b core.MetadataBackend, leader bool, err error) {
	if l := t.s.leader.Load(); l != nil && !l.lost() {
		if err := tabletRPCsServed(l.b); err != nil {
			return nil, false, err
		}
		return l.b, true, nil
	}
	ref := t.s.backend.Load()
	if ref == nil || !t.s.backendOpen.Load() {
		return nil, false, t.s.notLeader(t.s.currentLeader())
	}
	if err := tabletRPCsServed(ref.b); err != nil {
		return nil, false, err
	}
	return ref.b, false, nil
}

// appliedOffset is how far this coordinator's stream has applied: the
// highest revision a fetch it served has seen, or, when that is below
// want, the backend's own applied revision (one status call, only when
// the coordinator may be behind the caller).
func (t *tabletServerService) appliedOffset(ctx context.Context, b core.MetadataBackend, want int64) int64 {
	seen := t.s.streamApplied.Load()
	if seen >= want {
		return seen
	}
	st, err := b.Status(ctx)
	if err != nil {
		return seen
	}
	t.s.noteApplied(st.Revision)
	return max(seen, st.Revision)
}

// noteApplied raises the highest revision the stream has seen to rev.
func (s *Server) noteApplied(rev int64) {
	for {
		cur := s.streamApplied.Load()
		if rev <= cur || s.streamApplied.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// FetchMetadata serves the committed changes from an offset, long-polling,
// from this coordinator's own applied change log (leader or not). It never
// answers with a next offset below the request's from offset: a
// coordinator behind the caller waits for its replica to catch up and,
// when the wait ends first, answers empty with applied_offset telling how
// far behind it is.
func (t *tabletServerService) FetchMetadata(ctx context.Context, r *adminv1.FetchMetadataRequest) (*adminv1.FetchMetadataResponse, error) {
	b, leader, err := t.streamBackend()
	if err != nil {
		return nil, err
	}
	if r.FromOffset < 1 {
		return nil, fmt.Errorf("%w: fetch from offset %d: take a metadata snapshot first", core.ErrCompacted, r.FromOffset)
	}
	wait := t.s.opts.MetadataStreamMaxWait
	if r.MaxWaitMs > 0 && time.Duration(r.MaxWaitMs)*time.Millisecond < wait {
		wait = time.Duration(r.MaxWaitMs) * time.Millisecond
	}
	limit := int(r.MaxRecords)
	if limit <= 0 {
		limit = 10000
	}
	out := &adminv1.FetchMetadataResponse{NextOffset: r.FromOffset, Leader: leader}
	if f := t.s.feedFor(b, r.FromOffset); f != nil {
		if a, ok := f.fetch(ctx, r.FromOffset, wait, limit); ok {
			for _, ev := range a.events {
				out.Records = append(out.Records, metadataRecord(ev))
			}
			out.NextOffset = max(a.next, r.FromOffset)
			out.AppliedOffset = a.applied
			t.s.noteApplied(a.applied)
			return out, nil
		}
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	ch, err := b.Watch(wctx, "/", r.FromOffset)
	if err != nil {
		return nil, err
	}
	finish := func() (*adminv1.FetchMetadataResponse, error) {
		out.AppliedOffset = t.appliedOffset(ctx, b, out.NextOffset-1)
		return out, nil
	}
	add := func(resp core.WatchResponse) error {
		if resp.Err != nil {
			return resp.Err
		}
		for _, ev := range resp.Events {
			if ev.Revision < r.FromOffset {
				continue // never older than what the caller has
			}
			out.Records = append(out.Records, metadataRecord(ev))
		}
		if resp.Revision+1 > out.NextOffset {
			out.NextOffset = resp.Revision + 1
		}
		t.s.noteApplied(resp.Revision)
		return nil
	}
	// Wait for a first batch, then take what is already there.
	select {
	case resp, ok := <-ch:
		if !ok {
			return finish()
		}
		if err := add(resp); err != nil {
			if wctx.Err() != nil && !errors.Is(err, core.ErrCompacted) {
				return finish()
			}
			return nil, err
		}
	case <-wctx.Done():
		return finish()
	}
	for len(out.Records) < limit {
		select {
		case resp, ok := <-ch:
			if !ok {
				return finish()
			}
			if err := add(resp); err != nil {
				return finish()
			}
		default:
			return finish()
		}
	}
	return finish()
}

// FetchMetadataStream serves FetchMetadata requests over one stream: one
// response per request, in order; the first error ends the stream with
// its status (as FetchMetadata answers it).
func (t *tabletServerService) FetchMetadataStream(st adminv1.TabletServerService_FetchMetadataStreamServer) error {
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := t.FetchMetadata(st.Context(), r)
		if err != nil {
			return err
		}
		if err := st.Send(resp); err != nil {
			return err
		}
	}
}

// FetchMetadataSnapshot returns every node and the revision they reflect,
// from this coordinator's backend client (leader or not), in one message
// (see FetchMetadataSnapshotStream). A snapshot older than the request's
// min_offset (this coordinator is behind the caller) is not sent: the
// answer is UNAVAILABLE, to retry here or elsewhere.
func (t *tabletServerService) FetchMetadataSnapshot(ctx context.Context, r *adminv1.FetchMetadataSnapshotRequest) (*adminv1.FetchMetadataSnapshotResponse, error) {
	snap, release, err := t.metadataSnapshot(ctx, r)
	if err != nil {
		return nil, err
	}
	defer release()
	out := &adminv1.FetchMetadataSnapshotResponse{Offset: snap.Revision, Nodes: make([]*adminv1.MetadataNode, 0, len(snap.Nodes))}
	for _, n := range snap.Nodes {
		out.Nodes = append(out.Nodes, metadataNode(n))
	}
	return out, nil
}

// snapshotPartBytes is about the most node bytes (paths and data) one
// message of FetchMetadataSnapshotStream holds; a larger node goes alone.
const snapshotPartBytes = 1 << 20

// FetchMetadataSnapshotStream sends the snapshot FetchMetadataSnapshot
// answers with in parts of about snapshotPartBytes, each with its offset,
// as the backend reads them (core.StreamSnapshot: on a backend that
// streams, the coordinator holds one part at a time, not the tree).
func (t *tabletServerService) FetchMetadataSnapshotStream(r *adminv1.FetchMetadataSnapshotRequest, st adminv1.TabletServerService_FetchMetadataSnapshotStreamServer) error {
	b, release, err := t.snapshotSlot(st.Context())
	if err != nil {
		return err
	}
	defer release()
	var sendErr error
	first := true
	err = core.StreamSnapshot(st.Context(), b, "/", snapshotPartBytes, func(rev int64, nodes []core.Node) error {
		if first {
			first = false
			t.s.noteApplied(rev)
			if rev < r.MinOffset {
				return t.behind(rev, r.MinOffset)
			}
		}
		part := &adminv1.FetchMetadataSnapshotResponse{Offset: rev, Nodes: make([]*adminv1.MetadataNode, 0, len(nodes))}
		for _, n := range nodes {
			part.Nodes = append(part.Nodes, metadataNode(n))
		}
		sendErr = st.Send(part)
		return sendErr
	})
	switch {
	case err == nil:
		return nil
	case sendErr != nil && err == sendErr:
		return err
	case adminapi.DetailOf(err) != nil:
		return err // already a status (behind)
	}
	return err
}

// behind is the refusal of a snapshot at rev older than the caller's
// minimum.
func (t *tabletServerService) behind(rev, minimum int64) error {
	return fmt.Errorf("%w: coordinator %s has applied up to offset %d, behind the requested %d: retry, or ask another coordinator",
		core.ErrUnavailable, t.s.id, rev, minimum)
}

// snapshotSlot is the backend to take a metadata snapshot from, once one
// of the Options.MaxConcurrentSnapshots slots is free (waiting within
// ctx; waiting callers take the slots in turn); release frees it.
func (t *tabletServerService) snapshotSlot(ctx context.Context) (b core.MetadataBackend, release func(), err error) {
	b, _, err = t.streamBackend()
	if err != nil {
		return nil, nil, err
	}
	select {
	case t.s.snapshotSlots <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, status.FromContextError(ctx.Err()).Err()
	}
	return b, func() { <-t.s.snapshotSlots }, nil
}

// metadataSnapshot is the whole tree from this coordinator's backend
// client, refused with UNAVAILABLE when older than r's min_offset, taken in
// a snapshot slot (see snapshotSlot) that the caller releases once it has
// sent it.
func (t *tabletServerService) metadataSnapshot(ctx context.Context, r *adminv1.FetchMetadataSnapshotRequest) (snap core.Snapshot, release func(), err error) {
	b, release, err := t.snapshotSlot(ctx)
	if err != nil {
		return core.Snapshot{}, nil, err
	}
	if snap, err = b.Snapshot(ctx, "/"); err != nil {
		release()
		return core.Snapshot{}, nil, err
	}
	t.s.noteApplied(snap.Revision)
	if snap.Revision < r.MinOffset {
		release()
		return core.Snapshot{}, nil, t.behind(snap.Revision, r.MinOffset)
	}
	return snap, release, nil
}

func metadataNode(n core.Node) *adminv1.MetadataNode {
	return &adminv1.MetadataNode{Path: n.Path, Data: n.Data, Version: n.Stat.Version,
		CreateOffset: n.Stat.CreateRevision, ModifyOffset: n.Stat.ModifyRevision, EphemeralOwner: n.Stat.EphemeralOwner}
}

// metadataRecord is one change event as the metadata stream sends it.
func metadataRecord(ev core.WatchEvent) *adminv1.MetadataRecord {
	return &adminv1.MetadataRecord{Type: adminv1.MetadataRecord_Type(ev.Type),
		Path: ev.Path, Data: ev.Data, Offset: ev.Revision, Version: ev.Stat.Version}
}
