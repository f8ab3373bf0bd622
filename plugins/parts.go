package plugins

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/metaplane/metaplane/core"
	pb "github.com/metaplane/metaplane/proto/metaplane/v1"
)

// The optional parts of a host-side client. A *Client implements the
// required contract only; Plugin.NewClient wraps it in one layer per part
// the plugin offers (the plugin reports a part only when its backend both
// implements and declares it, see interfacesOf), each layer implementing
// that part and Unwrap. So across the boundary a part the plugin did not
// declare is absent: a type assertion for it is false, and core.Optional,
// which follows Unwrap, finds every part that is present.

// layer is one optional part's wrapper: the next layer in (ultimately the
// *Client) and the client that makes the calls.
type layer struct {
	core.MetadataBackend
	c *Client
}

// Unwrap returns the next layer in.
func (l layer) Unwrap() core.MetadataBackend { return l.MetadataBackend }

type (
	leaseLayer      struct{ layer }
	idLayer         struct{ layer }
	membershipLayer struct{ layer }
	faultLayer      struct{ layer }
	expiryLayer     struct{ layer }
	importLayer     struct{ layer }
	transferLayer   struct{ layer }
	streamLayer     struct{ layer }
)

var (
	_ core.LeaseManager         = leaseLayer{}
	_ core.IDAllocator          = idLayer{}
	_ core.MembershipManager    = membershipLayer{}
	_ core.ForceRemover         = membershipLayer{}
	_ core.FaultInjector        = faultLayer{}
	_ core.SessionExpirer       = expiryLayer{}
	_ core.Importer             = importLayer{}
	_ core.LeadershipTransferer = transferLayer{}
	_ core.SnapshotStreamer     = streamLayer{}
)

// expose wraps c in a layer for each part ifaces offers.
func expose(c *Client, ifaces *pb.Interfaces) core.MetadataBackend {
	var b core.MetadataBackend = c
	wrap := func(on bool, mk func(layer) core.MetadataBackend) {
		if on {
			b = mk(layer{MetadataBackend: b, c: c})
		}
	}
	wrap(ifaces.GetSnapshotStreamer(), func(l layer) core.MetadataBackend { return streamLayer{l} })
	wrap(ifaces.GetImporter(), func(l layer) core.MetadataBackend { return importLayer{l} })
	wrap(ifaces.GetLeadershipTransferer(), func(l layer) core.MetadataBackend { return transferLayer{l} })
	wrap(ifaces.GetSessionExpirer(), func(l layer) core.MetadataBackend { return expiryLayer{l} })
	wrap(ifaces.GetFaultInjector(), func(l layer) core.MetadataBackend { return faultLayer{l} })
	wrap(ifaces.GetMembershipManager(), func(l layer) core.MetadataBackend { return membershipLayer{l} })
	wrap(ifaces.GetIdAllocator(), func(l layer) core.MetadataBackend { return idLayer{l} })
	wrap(ifaces.GetLeaseManager(), func(l layer) core.MetadataBackend { return leaseLayer{l} })
	return b
}

// ClientOf returns the *Client under b (b itself, or the client its part
// layers wrap), for the host's own bookkeeping and tests: core.Optional
// walks the layers' Unwrap chain.
func ClientOf(b core.MetadataBackend) (*Client, bool) { return core.Optional[*Client](b) }

// GrantLease grants a lease in the plugin. See core.LeaseManager.
func (l leaseLayer) GrantLease(ctx context.Context, owner string, ttl time.Duration, fence core.Fence) (int64, error) {
	return call(l.c, ctx, func(ctx context.Context, r *remote) (int64, error) {
		resp, err := r.conn.rpc.GrantLease(ctx, &pb.GrantLeaseRequest{ClientId: r.id, Owner: owner, TtlNanos: int64(ttl), Fence: fenceToProto(fence)})
		return resp.GetLeaseId(), err
	})
}

// RenewLease renews a lease in the plugin. See core.LeaseManager.
func (l leaseLayer) RenewLease(ctx context.Context, id int64) error {
	return callErr(l.c, ctx, func(ctx context.Context, r *remote) (*pb.RenewLeaseResponse, error) {
		return r.conn.rpc.RenewLease(ctx, &pb.RenewLeaseRequest{ClientId: r.id, LeaseId: id})
	})
}

// RevokeLease revokes a lease in the plugin. See core.LeaseManager.
func (l leaseLayer) RevokeLease(ctx context.Context, id int64, fence core.Fence) error {
	return callErr(l.c, ctx, func(ctx context.Context, r *remote) (*pb.RevokeLeaseResponse, error) {
		return r.conn.rpc.RevokeLease(ctx, &pb.RevokeLeaseRequest{ClientId: r.id, LeaseId: id, Fence: fenceToProto(fence)})
	})
}

// AllocateIDs reserves [first, first+n) from the counter at path with the
// backend's native allocator, in one plugin call. See core.IDAllocator.
func (l idLayer) AllocateIDs(ctx context.Context, path string, n int64, fence core.Fence) (int64, error) {
	return call(l.c, ctx, func(ctx context.Context, r *remote) (int64, error) {
		resp, err := r.conn.rpc.AllocateIDs(ctx, &pb.AllocateIDsRequest{ClientId: r.id, Path: path, Count: n, Fence: fenceToProto(fence)})
		return resp.GetFirst(), err
	})
}

// AddVoter adds a voter in the plugin. See core.MembershipManager.
func (l membershipLayer) AddVoter(ctx context.Context, id string, address string) error {
	return callErr(l.c, ctx, func(ctx context.Context, r *remote) (*pb.AddVoterResponse, error) {
		return r.conn.rpc.AddVoter(ctx, &pb.AddVoterRequest{ClientId: r.id, Id: id, Address: address})
	})
}

// RemoveVoter removes a voter in the plugin. See core.MembershipManager.
func (l membershipLayer) RemoveVoter(ctx context.Context, id string) error {
	return callErr(l.c, ctx, func(ctx context.Context, r *remote) (*pb.RemoveVoterResponse, error) {
		return r.conn.rpc.RemoveVoter(ctx, &pb.RemoveVoterRequest{ClientId: r.id, Id: id})
	})
}

// ForceRemoveVoter removes a member that is gone for good in the plugin.
// See core.ForceRemover.
func (l membershipLayer) ForceRemoveVoter(ctx context.Context, id string) error {
	return callErr(l.c, ctx, func(ctx context.Context, r *remote) (*pb.RemoveVoterResponse, error) {
		return r.conn.rpc.RemoveVoter(ctx, &pb.RemoveVoterRequest{ClientId: r.id, Id: id, Force: true})
	})
}

// TransferLeadership hands the plugin's consensus leadership to a member.
// See core.LeadershipTransferer.
func (l transferLayer) TransferLeadership(ctx context.Context, to string) (core.LeadershipTransfer, error) {
	return call(l.c, ctx, func(ctx context.Context, r *remote) (core.LeadershipTransfer, error) {
		resp, err := r.conn.rpc.TransferLeadership(ctx, &pb.TransferLeadershipRequest{ClientId: r.id, To: to})
		return core.LeadershipTransfer{MemberID: resp.GetMemberId(), Term: resp.GetTerm()}, err
	})
}

// FailNextWrite makes the plugin's next write fail with injected (its
// sentinel, message and details cross the boundary). See
// core.FaultInjector. It has no error result: when the plugin cannot be
// reached, the request is logged and dropped.
func (l faultLayer) FailNextWrite(injected error) {
	l.c.housekeep("FailNextWrite", func(ctx context.Context, r *remote) error {
		_, err := r.conn.rpc.FailNextWrite(ctx, &pb.FailNextWriteRequest{ClientId: r.id, Error: ErrorToProto(injected)})
		return err
	})
}

// SetLatency adds d before every call in the plugin. See
// core.FaultInjector; like FailNextWrite, failures are logged.
func (l faultLayer) SetLatency(d time.Duration) {
	l.c.housekeep("SetLatency", func(ctx context.Context, r *remote) error {
		_, err := r.conn.rpc.SetLatency(ctx, &pb.SetLatencyRequest{ClientId: r.id, LatencyNanos: int64(d)})
		return err
	})
}

// ExpireSession expires the client's session in the plugin and returns
// once the host has seen the new session (or ctx ends). See
// core.SessionExpirer.
func (l expiryLayer) ExpireSession(ctx context.Context) error {
	c := l.c
	return callErr(c, ctx, func(ctx context.Context, r *remote) (*pb.ExpireSessionResponse, error) {
		old := c.Session().ID
		if _, err := r.conn.rpc.ExpireSession(ctx, &pb.ExpireSessionRequest{ClientId: r.id}); err != nil {
			return nil, err
		}
		// The plugin established the new session before answering; wait
		// until its event has reached this side so Session() reports it.
		wait, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		for {
			c.mu.Lock()
			cur, changed := c.session, c.changed
			live := c.rem == r
			c.mu.Unlock()
			if !live || (cur.ID != old && cur.State == core.SessionConnected) {
				return nil, nil
			}
			select {
			case <-changed:
			case <-wait.Done():
				return nil, nil
			}
		}
	})
}

// Import loads nodes in bulk in the plugin, in one call. See core.Importer.
func (l importLayer) Import(ctx context.Context, nodes []core.ImportNode, fence core.Fence) error {
	return callErr(l.c, ctx, func(ctx context.Context, r *remote) (*pb.ImportResponse, error) {
		return r.conn.rpc.Import(ctx, &pb.ImportRequest{ClientId: r.id, Nodes: importNodesToProto(nodes), Fence: fenceToProto(fence)})
	})
}

// StreamSnapshot reads the plugin's snapshot a page at a time, asking for
// each page once fn has taken the one before (the plugin reads no
// further ahead). See core.SnapshotStreamer.
func (l streamLayer) StreamSnapshot(ctx context.Context, prefix string, pageBytes int, fn func(rev int64, nodes []core.Node) error) error {
	ctx, done := l.c.passCtx(ctx)
	defer done()
	r, err := l.c.current()
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel() // an error of fn ends the stream
	stream, err := r.conn.rpc.SnapshotStream(sctx)
	if err != nil {
		return callError(ctx, r.conn, err)
	}
	if err := stream.Send(&pb.SnapshotStreamRequest{ClientId: r.id, Prefix: prefix, PageBytes: int64(pageBytes)}); err != nil {
		return callError(ctx, r.conn, err)
	}
	pages := 0
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if pages == 0 {
				return fmt.Errorf("%w: the plugin's snapshot stream ended without a page", core.ErrUnavailable)
			}
			return nil
		}
		if err != nil {
			return callError(ctx, r.conn, err)
		}
		pages++
		if err := fn(m.Revision, nodesFromProto(m.Nodes)); err != nil {
			return err
		}
		// Ask for the next page (the plugin answers EOF after the last).
		if err := stream.Send(&pb.SnapshotStreamRequest{}); err != nil && !errors.Is(err, io.EOF) {
			return callError(ctx, r.conn, err)
		}
	}
}
