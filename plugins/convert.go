package plugins

import (
	"time"

	"github.com/metaplane/metaplane/core"
	pb "github.com/metaplane/metaplane/proto/metaplane/v1"
)

// Pure conversions between core's types and the wire's. Both directions
// copy; neither keeps a reference to its argument's slices beyond what
// protobuf itself shares (byte slices are shared, never modified).

func statToProto(s core.Stat) *pb.Stat {
	out := &pb.Stat{}
	fillStatProto(out, s)
	return out
}

// fillStatProto sets the fields of a zero dst from s.
func fillStatProto(dst *pb.Stat, s core.Stat) {
	dst.Version, dst.CreateRevision, dst.ModifyRevision = s.Version, s.CreateRevision, s.ModifyRevision
	dst.CreateTime, dst.ModifyTime = s.CreateTime, s.ModifyTime
	dst.EphemeralOwner, dst.NumChildren, dst.DataLength = s.EphemeralOwner, s.NumChildren, s.DataLength
	dst.ChildrenRevision = s.ChildrenRevision
}

func statFromProto(s *pb.Stat) core.Stat {
	if s == nil {
		return core.Stat{}
	}
	return core.Stat{
		Version:          s.Version,
		CreateRevision:   s.CreateRevision,
		ModifyRevision:   s.ModifyRevision,
		CreateTime:       s.CreateTime,
		ModifyTime:       s.ModifyTime,
		EphemeralOwner:   s.EphemeralOwner,
		NumChildren:      s.NumChildren,
		DataLength:       s.DataLength,
		ChildrenRevision: s.ChildrenRevision,
	}
}

func nodeToProto(n core.Node) *pb.Node {
	return &pb.Node{Path: n.Path, Data: n.Data, Stat: statToProto(n.Stat)}
}

func nodeFromProto(n *pb.Node) core.Node {
	if n == nil {
		return core.Node{}
	}
	return core.Node{Path: n.Path, Data: n.Data, Stat: statFromProto(n.Stat)}
}

func nodesToProto(ns []core.Node) []*pb.Node {
	out := make([]*pb.Node, len(ns))
	for i, n := range ns {
		out[i] = nodeToProto(n)
	}
	return out
}

func nodesFromProto(ns []*pb.Node) []core.Node {
	if len(ns) == 0 {
		return nil
	}
	out := make([]core.Node, len(ns))
	for i, n := range ns {
		out[i] = nodeFromProto(n)
	}
	return out
}

func readOptionsToProto(o core.ReadOptions) *pb.ReadOptions {
	return &pb.ReadOptions{Stale: o.Stale, NoData: o.NoData}
}

func readOptionsFromProto(o *pb.ReadOptions) core.ReadOptions {
	if o == nil {
		return core.ReadOptions{}
	}
	return core.ReadOptions{Stale: o.Stale, NoData: o.NoData}
}

func fenceToProto(f core.Fence) *pb.Fence {
	if !f.Valid && f.Epoch == 0 && f.Token == 0 {
		return nil
	}
	return &pb.Fence{Epoch: f.Epoch, Token: f.Token, Valid: f.Valid}
}

func fenceFromProto(f *pb.Fence) core.Fence {
	if f == nil {
		return core.Fence{}
	}
	return core.Fence{Epoch: f.Epoch, Token: f.Token, Valid: f.Valid}
}

func opToProto(o core.Op) *pb.Op {
	return &pb.Op{
		Type:        pb.OpType(o.Type),
		Path:        o.Path,
		Data:        o.Data,
		Version:     o.Version,
		Mode:        pb.CreateMode(o.Mode),
		MakeParents: o.MakeParents,
		Lease:       o.Lease,
	}
}

func opFromProto(o *pb.Op) core.Op {
	if o == nil {
		return core.Op{}
	}
	return core.Op{
		Type:        core.OpType(o.Type),
		Path:        o.Path,
		Data:        o.Data,
		Version:     o.Version,
		Mode:        core.CreateMode(o.Mode),
		MakeParents: o.MakeParents,
		Lease:       o.Lease,
	}
}

func opsToProto(ops []core.Op) []*pb.Op {
	out := make([]*pb.Op, len(ops))
	for i, o := range ops {
		out[i] = opToProto(o)
	}
	return out
}

func opsFromProto(ops []*pb.Op) []core.Op {
	out := make([]core.Op, len(ops))
	for i, o := range ops {
		out[i] = opFromProto(o)
	}
	return out
}

func txnResultToProto(r core.TxnResult) *pb.TxnResponse {
	out := &pb.TxnResponse{Revision: r.Revision, Results: make([]*pb.OpResult, len(r.Results))}
	for i, res := range r.Results {
		out.Results[i] = &pb.OpResult{Type: pb.OpType(res.Type), Path: res.Path, Stat: statToProto(res.Stat)}
	}
	return out
}

func txnResultFromProto(r *pb.TxnResponse) core.TxnResult {
	out := core.TxnResult{Revision: r.GetRevision(), Results: make([]core.OpResult, len(r.GetResults()))}
	for i, res := range r.GetResults() {
		out.Results[i] = core.OpResult{Type: core.OpType(res.Type), Path: res.Path, Stat: statFromProto(res.Stat)}
	}
	return out
}

func getResultsToProto(rs []core.GetResult) []*pb.GetResult {
	out := make([]*pb.GetResult, len(rs))
	for i, r := range rs {
		out[i] = &pb.GetResult{Node: nodeToProto(r.Node), Error: ErrorToProto(r.Err)}
	}
	return out
}

func getResultsFromProto(rs []*pb.GetResult) []core.GetResult {
	out := make([]core.GetResult, len(rs))
	for i, r := range rs {
		out[i] = core.GetResult{Node: nodeFromProto(r.Node), Err: ErrorFromProto(r.Error)}
	}
	return out
}

func watchResponseToProto(r core.WatchResponse) *pb.WatchResponse {
	out := &pb.WatchResponse{Reset_: r.Reset, Partial: r.Partial, Revision: r.Revision, Error: ErrorToProto(r.Err)}
	out.Events = appendWatchEventsToProto(out.Events, r.Events)
	return out
}

// appendWatchEventsToProto appends evs to dst as wire events (allocated
// together: one allocation per call, not one per event).
func appendWatchEventsToProto(dst []*pb.WatchEvent, evs []core.WatchEvent) []*pb.WatchEvent {
	if len(evs) == 0 {
		return dst
	}
	wire := make([]pb.WatchEvent, len(evs))
	stats := make([]pb.Stat, len(evs))
	for i, e := range evs {
		fillStatProto(&stats[i], e.Stat)
		w := &wire[i]
		w.Type, w.Path, w.Data, w.Stat, w.Revision = pb.EventType(e.Type), e.Path, e.Data, &stats[i], e.Revision
		dst = append(dst, w)
	}
	return dst
}

func watchResponseFromProto(r *pb.WatchResponse) core.WatchResponse {
	out := core.WatchResponse{Reset: r.Reset_, Partial: r.Partial, Revision: r.Revision, Err: ErrorFromProto(r.Error)}
	if len(r.Events) > 0 {
		out.Events = make([]core.WatchEvent, len(r.Events))
		for i, e := range r.Events {
			out.Events[i] = core.WatchEvent{
				Type:     core.EventType(e.Type),
				Path:     e.Path,
				Data:     e.Data,
				Stat:     statFromProto(e.Stat),
				Revision: e.Revision,
			}
		}
	}
	return out
}

func sessionInfoToProto(s core.SessionInfo) *pb.SessionInfo {
	return &pb.SessionInfo{Id: s.ID, TimeoutNanos: int64(s.Timeout), State: pb.SessionState(s.State)}
}

func sessionInfoFromProto(s *pb.SessionInfo) core.SessionInfo {
	if s == nil {
		return core.SessionInfo{}
	}
	return core.SessionInfo{ID: s.Id, Timeout: time.Duration(s.TimeoutNanos), State: core.SessionState(s.State)}
}

func leaderToProto(l core.LeaderInfo) *pb.LeaderInfo {
	return &pb.LeaderInfo{Id: l.ID, Address: l.Address, Epoch: l.Epoch}
}

func leaderFromProto(l *pb.LeaderInfo) core.LeaderInfo {
	if l == nil {
		return core.LeaderInfo{}
	}
	return core.LeaderInfo{ID: l.Id, Address: l.Address, Epoch: l.Epoch}
}

func statusToProto(s core.Status) *pb.StatusResponse {
	out := &pb.StatusResponse{
		Backend:         s.Backend,
		MemberId:        s.MemberID,
		Role:            string(s.Role),
		Epoch:           s.Epoch,
		LeaderId:        s.LeaderID,
		LeaderAddress:   s.LeaderAddress,
		CommitIndex:     s.CommitIndex,
		AppliedIndex:    s.AppliedIndex,
		Revision:        s.Revision,
		Details:         s.Details,
		ClusterId:       s.ClusterID,
		SnapshotIndex:   s.SnapshotIndex,
		ProposalsFailed: s.ProposalsFailed,
	}
	for _, m := range s.Members {
		pm := &pb.MemberStatus{
			Id: m.ID, Address: m.Address, Role: string(m.Role), MatchIndex: m.MatchIndex, Lag: m.Lag,
			Kind: string(m.Kind), Reachable: m.Reachable, SnapshotIndex: m.SnapshotIndex,
		}
		if !m.LastContact.IsZero() {
			pm.LastContactUnixMs = m.LastContact.UnixMilli()
		}
		out.Members = append(out.Members, pm)
	}
	return out
}

func statusFromProto(s *pb.StatusResponse) core.Status {
	out := core.Status{
		Backend:         s.Backend,
		MemberID:        s.MemberId,
		Role:            core.Role(s.Role),
		Epoch:           s.Epoch,
		LeaderID:        s.LeaderId,
		LeaderAddress:   s.LeaderAddress,
		CommitIndex:     s.CommitIndex,
		AppliedIndex:    s.AppliedIndex,
		Revision:        s.Revision,
		Details:         s.Details,
		ClusterID:       s.ClusterId,
		SnapshotIndex:   s.SnapshotIndex,
		ProposalsFailed: s.ProposalsFailed,
	}
	for _, m := range s.Members {
		cm := core.MemberStatus{
			ID: m.Id, Address: m.Address, Role: core.Role(m.Role), MatchIndex: m.MatchIndex, Lag: m.Lag,
			Kind: core.MemberKind(m.Kind), Reachable: m.Reachable, SnapshotIndex: m.SnapshotIndex,
		}
		if m.LastContactUnixMs != 0 {
			cm.LastContact = time.UnixMilli(m.LastContactUnixMs)
		}
		out.Members = append(out.Members, cm)
	}
	return out
}

func descriptorToProto(d core.BackendDescriptor) *pb.BackendDescriptor {
	return &pb.BackendDescriptor{Name: d.Name, SelectorKey: d.SelectorKey, Description: d.Description, Deprecated: d.Deprecated,
		TabletServers: pb.TabletServerMode(d.TabletServers)}
}

func descriptorFromProto(d *pb.BackendDescriptor) core.BackendDescriptor {
	if d == nil {
		return core.BackendDescriptor{}
	}
	return core.BackendDescriptor{Name: d.Name, SelectorKey: d.SelectorKey, Description: d.Description, Deprecated: d.Deprecated,
		TabletServers: core.TabletServerMode(d.TabletServers)}
}

// interfacesOf reports which optional parts b offers: implemented and
// declared (core.Optional).
func interfacesOf(b core.MetadataBackend) *pb.Interfaces {
	_, lm := core.Optional[core.LeaseManager](b)
	_, ia := core.Optional[core.IDAllocator](b)
	_, mm := core.Optional[core.MembershipManager](b)
	_, fi := core.Optional[core.FaultInjector](b)
	_, se := core.Optional[core.SessionExpirer](b)
	_, im := core.Optional[core.Importer](b)
	_, lt := core.Optional[core.LeadershipTransferer](b)
	_, ss := core.Optional[core.SnapshotStreamer](b)
	return &pb.Interfaces{LeaseManager: lm, IdAllocator: ia, MembershipManager: mm, FaultInjector: fi, SessionExpirer: se, Importer: im,
		LeadershipTransferer: lt, SnapshotStreamer: ss}
}

func capabilitiesToProto(c core.Capabilities, ifaces *pb.Interfaces) *pb.Capabilities {
	return &pb.Capabilities{
		Name:                      c.Name,
		ExactHistory:              c.ExactHistory,
		LinearizableFollowerReads: c.LinearizableFollowerReads,
		StaleReads:                c.StaleReads,
		Leases:                    c.Leases,
		NativeIdAllocation:        c.NativeIDAllocation,
		Membership:                c.Membership,
		FaultInjection:            c.FaultInjection,
		MaxValueSize:              int64(c.MaxValueSize),
		SelectorKey:               c.SelectorKey,
		Interfaces:                ifaces,
		SessionExpiry:             c.SessionExpiry,
		ConsensusStatus:           c.ConsensusStatus,
		TabletServers:             pb.TabletServerMode(c.TabletServers),
		Import:                    c.Import,
		ImportKeepsVersions:       c.ImportKeepsVersions,
		LeadershipTransfer:        c.LeadershipTransfer,
		StreamedSnapshots:         c.StreamedSnapshots,
	}
}

func capabilitiesFromProto(c *pb.Capabilities) (core.Capabilities, *pb.Interfaces) {
	if c == nil {
		return core.Capabilities{}, &pb.Interfaces{}
	}
	ifaces := c.Interfaces
	if ifaces == nil {
		ifaces = &pb.Interfaces{}
	}
	return core.Capabilities{
		Name:                      c.Name,
		ExactHistory:              c.ExactHistory,
		LinearizableFollowerReads: c.LinearizableFollowerReads,
		StaleReads:                c.StaleReads,
		Leases:                    c.Leases,
		NativeIDAllocation:        c.NativeIdAllocation,
		Membership:                c.Membership,
		FaultInjection:            c.FaultInjection,
		MaxValueSize:              int(c.MaxValueSize),
		SelectorKey:               c.SelectorKey,
		SessionExpiry:             c.SessionExpiry,
		ConsensusStatus:           c.ConsensusStatus,
		TabletServers:             core.TabletServerMode(c.TabletServers),
		Import:                    c.Import,
		ImportKeepsVersions:       c.ImportKeepsVersions,
		LeadershipTransfer:        c.LeadershipTransfer,
		StreamedSnapshots:         c.StreamedSnapshots,
	}, ifaces
}

func importNodesToProto(ns []core.ImportNode) []*pb.ImportNode {
	out := make([]*pb.ImportNode, len(ns))
	for i, n := range ns {
		out[i] = &pb.ImportNode{Path: n.Path, Data: n.Data, Version: n.Version, CreateTime: n.CreateTime, ModifyTime: n.ModifyTime, NextSequence: n.NextSequence}
	}
	return out
}

func importNodesFromProto(ns []*pb.ImportNode) []core.ImportNode {
	out := make([]core.ImportNode, len(ns))
	for i, n := range ns {
		out[i] = core.ImportNode{Path: n.GetPath(), Data: n.GetData(), Version: n.GetVersion(), CreateTime: n.GetCreateTime(), ModifyTime: n.GetModifyTime(), NextSequence: n.GetNextSequence()}
	}
	return out
}
