package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// The bucket leadership RPCs: AdjustIsr and ControlledShutdown from the
// tablet servers, ListBuckets and ElectLeaders from operators. The
// changes run on the controller's goroutine (controller.go).

// maxAdjustIsrBuckets bounds the buckets of one AdjustIsr request.
const maxAdjustIsrBuckets = 100000

// bucketLeader is the leader state for the bucket RPCs: the leader
// coordinator on every backend (tablet servers on ZooKeeper reach it at
// the address of its election node), NOT_LEADER elsewhere.
func (s *Server) bucketLeader() (*leaderState, error) { return s.serving() }

// AdjustIsr changes the ISR of buckets the calling server leads (see
// adminv1.TabletServerServiceServer).
func (t *tabletServerService) AdjustIsr(ctx context.Context, r *adminv1.AdjustIsrRequest) (*adminv1.AdjustIsrResponse, error) {
	l, err := t.s.bucketLeader()
	if err != nil {
		return nil, err
	}
	if len(r.Buckets) > maxAdjustIsrBuckets {
		return nil, &adminapi.FieldError{Field: "buckets",
			Err: fmt.Errorf("%w: %d buckets in one AdjustIsr request: the limit is %d; split the request", core.ErrInvalidArgument, len(r.Buckets), maxAdjustIsrBuckets)}
	}
	keys := make([]catalog.BucketKey, len(r.Buckets))
	for i, b := range r.Buckets {
		keys[i] = catalog.BucketKey{TableID: b.TableId, PartitionID: b.PartitionId, Bucket: b.Bucket}
		if b.Bucket < 0 || (b.PartitionId < 0 && b.TableId < 0) {
			return nil, &adminapi.FieldError{Field: "buckets",
				Err: fmt.Errorf("%w: AdjustIsr bucket %d: %s is not a bucket", core.ErrInvalidArgument, i, keys[i])}
		}
	}
	out := &adminv1.AdjustIsrResponse{CoordinatorEpoch: l.lead.Epoch(), Results: make([]*adminv1.AdjustIsrResponse_Result, len(r.Buckets))}
	var staged []int // results to confirm once written
	err = l.ctl.submit(ctx, l.lead.Lost(), func(ctx context.Context, rd *round) {
		recs, err := rd.load(ctx, keys)
		for i, b := range r.Buckets {
			res := &adminv1.AdjustIsrResponse_Result{Bucket: bucketRef(keys[i])}
			out.Results[i] = res
			if err != nil {
				res.ErrorCode, res.ErrorMessage = adminapi.IsrUnknownBucket, err.Error()
				continue
			}
			rec := recs[i]
			if rec == nil {
				res.ErrorCode, res.ErrorMessage = adminapi.IsrUnknownBucket, fmt.Sprintf("%s does not exist", keys[i])
				continue
			}
			code, msg, change := adjustIsr(rec, r.ServerId, b, rd.lv)
			res.ErrorCode, res.ErrorMessage = code, msg
			if change != nil {
				rd.stage(rec, *change)
				staged = append(staged, i)
			}
			fillResult(res, rec.rec)
		}
	})
	if err != nil {
		for _, i := range staged {
			// The write's outcome is unknown: the record after the call is
			// not known either (the staged one may never be written), so
			// the answer carries none. Asking again is safe: a change
			// already made is answered with its record.
			out.Results[i] = &adminv1.AdjustIsrResponse_Result{Bucket: out.Results[i].Bucket,
				ErrorCode:    adminapi.CodeUnavailable,
				ErrorMessage: "the change may not have been written (its outcome is unknown; ask again): " + err.Error()}
		}
		if len(staged) == 0 && !errors.Is(err, core.ErrBadVersion) && !errors.Is(err, core.ErrNotFound) {
			return nil, err
		}
	}
	return out, nil
}

// adjustIsr decides one bucket of an AdjustIsr request from server: an
// error code and message, or the change to stage (nil: none).
func adjustIsr(b *bucketRec, server int32, req *adminv1.AdjustIsrRequest_Bucket, lv liveness) (code, msg string, change *catalog.LeaderAndIsr) {
	rec := b.rec
	if req.LeaderEpoch != rec.LeaderEpoch {
		return adminapi.IsrFencedLeaderEpoch, fmt.Sprintf("%s: leader epoch %d is not the bucket's, %d", b.key, req.LeaderEpoch, rec.LeaderEpoch), nil
	}
	if server != rec.Leader {
		return adminapi.IsrNotLeader, fmt.Sprintf("%s: tablet server %d does not lead it (leader %d)", b.key, server, rec.Leader), nil
	}
	isr := req.NewIsr
	if catalog.SameReplicas(isr, rec.ISR) {
		return "", "", nil // already so: a retry of a change made, answered with the record
	}
	if req.BucketEpoch != rec.BucketEpoch {
		return adminapi.IsrInvalidUpdateVersion, fmt.Sprintf("%s: bucket epoch %d is not the bucket's, %d", b.key, req.BucketEpoch, rec.BucketEpoch), nil
	}
	if !slices.Contains(isr, rec.Leader) {
		return adminapi.IsrIneligibleReplica, fmt.Sprintf("%s: the new ISR %v leaves out the leader %d", b.key, isr, rec.Leader), nil
	}
	seen := map[int32]bool{}
	for _, r := range isr {
		switch {
		case seen[r]:
			return adminapi.IsrIneligibleReplica, fmt.Sprintf("%s: the new ISR %v names %d twice", b.key, isr, r), nil
		case !slices.Contains(b.replicas, r):
			return adminapi.IsrIneligibleReplica, fmt.Sprintf("%s: %d is not an assigned replica (replicas %v)", b.key, r, b.replicas), nil
		case !slices.Contains(rec.ISR, r) && !lv.eligible(r):
			return adminapi.IsrIneligibleReplica, fmt.Sprintf("%s: %d may not join the ISR: it is not registered or is shutting down", b.key, r), nil
		}
		seen[r] = true
	}
	next := rec
	next.ISR = slices.Clone(isr)
	next.BucketEpoch++
	return "", "", &next
}

func bucketRef(k catalog.BucketKey) *adminv1.BucketRef {
	return &adminv1.BucketRef{TableId: k.TableID, PartitionId: k.PartitionID, Bucket: k.Bucket}
}

func fillResult(res *adminv1.AdjustIsrResponse_Result, rec catalog.LeaderAndIsr) {
	res.Leader, res.LeaderEpoch, res.Isr, res.BucketEpoch, res.CoordinatorEpoch = rec.Leader, rec.LeaderEpoch, slices.Clone(rec.ISR), rec.BucketEpoch, rec.CoordinatorEpoch
}

// ControlledShutdown moves the leaderships of a tablet server that is
// stopping (see adminv1.TabletServerServiceServer).
func (t *tabletServerService) ControlledShutdown(ctx context.Context, r *adminv1.ControlledShutdownRequest) (*adminv1.ControlledShutdownResponse, error) {
	l, err := t.s.bucketLeader()
	if err != nil {
		return nil, err
	}
	out := &adminv1.ControlledShutdownResponse{CoordinatorEpoch: l.lead.Epoch()}
	var terr error
	err = l.ctl.submit(ctx, l.lead.Lost(), func(ctx context.Context, rd *round) {
		out.Moved, out.Remaining = 0, nil
		var owner int64 = -1
		for _, ts := range rd.servers {
			if ts.ID == r.ServerId {
				owner = ts.Owner
			}
		}
		if owner < 0 {
			return // not registered: its buckets are re-elected as a gone server's
		}
		l.ctl.mu.Lock()
		l.ctl.shuttingDown[r.ServerId] = owner
		l.ctl.mu.Unlock()
		rd.lv.shuttingDown[r.ServerId] = true
		var keys []catalog.BucketKey
		for _, b := range l.buckets.perServer()[r.ServerId] {
			keys = append(keys, stateKey(b))
		}
		recs, err := rd.load(ctx, keys)
		if err != nil {
			terr = err
			return
		}
		for _, b := range recs {
			if b == nil {
				continue
			}
			rec, ok, moved, stays := electOnShutdown(b.rec, b.replicas, r.ServerId, rd.lv)
			if stays {
				out.Remaining = append(out.Remaining, bucketRef(b.key))
			}
			if moved {
				out.Moved++
			}
			if ok {
				rd.stage(b, rec)
			}
		}
	})
	if err == nil {
		err = terr
	}
	if err != nil {
		return nil, err
	}
	t.s.log.Info("controlled shutdown of a tablet server", "tablet_server", r.ServerId, "moved", out.Moved, "still_led", len(out.Remaining))
	return out, nil
}

// DeregisterTabletServer ends a stopping tablet server's lease.
func (t *tabletServerService) DeregisterTabletServer(ctx context.Context, r *adminv1.DeregisterTabletServerRequest) (*adminv1.DeregisterTabletServerResponse, error) {
	l, err := t.leader()
	if err != nil {
		return nil, err
	}
	lm, _ := core.Optional[core.LeaseManager](l.b) // present: tabletRPCsServed
	st, exists, err := core.Exists(ctx, l.img, catalog.TabletServerPath(r.ServerId))
	if err != nil {
		return nil, err
	}
	if !exists || st.EphemeralOwner != r.LeaseId {
		// Gone already, or registered again under another lease: leave
		// the newer registration alone.
		return &adminv1.DeregisterTabletServerResponse{}, nil
	}
	if err := lm.RevokeLease(ctx, r.LeaseId, l.lead.Fence()); err != nil && !errors.Is(err, core.ErrSessionExpired) && !errors.Is(err, core.ErrNotFound) {
		return nil, err
	}
	t.s.log.Info("tablet server deregistered", "tablet_server", r.ServerId, "lease", r.LeaseId)
	return &adminv1.DeregisterTabletServerResponse{}, nil
}

// ------------------------------------------------------------ operators

// maxListBucketsPage is the most buckets one ListBuckets page holds.
const (
	defaultListBucketsPage = 1000
	maxListBucketsPage     = 10000
)

// ListBuckets lists a table's buckets with their leadership, in pages.
func (a *adminService) ListBuckets(ctx context.Context, r *adminv1.ListBucketsRequest) (*adminv1.ListBucketsResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	size := int(r.PageSize)
	if size < 0 || size > maxListBucketsPage {
		return nil, &adminapi.FieldError{Field: "page_size",
			Err: fmt.Errorf("%w: page size %d is out of range: want 1 to %d (0: %d)", core.ErrInvalidArgument, size, maxListBucketsPage, defaultListBucketsPage)}
	}
	if size == 0 {
		size = defaultListBucketsPage
	}
	owners, err := bucketOwners(ctx, l, r.Database, r.Table, r.Partition)
	if err != nil {
		return nil, withField(err, tableFields)
	}
	// The page token is "<owner index>/<bucket>": where the next page
	// starts.
	fromOwner, fromBucket := 0, int32(0)
	if r.PageToken != "" {
		o, b, ok := strings.Cut(r.PageToken, "/")
		oi, err1 := strconv.Atoi(o)
		bi, err2 := strconv.ParseInt(b, 10, 32)
		if !ok || err1 != nil || err2 != nil || oi < 0 || oi > len(owners) {
			return nil, &adminapi.FieldError{Field: "page_token",
				Err: fmt.Errorf("%w: page token %q is not one ListBuckets gave for %s.%s", core.ErrInvalidArgument, r.PageToken, r.Database, r.Table)}
		}
		fromOwner, fromBucket = oi, int32(bi)
	}
	alive := map[int32]bool{}
	if ids, err := l.cat.TabletServerIDs(ctx); err == nil {
		for _, id := range ids {
			alive[id] = true
		}
	}
	out := &adminv1.ListBucketsResponse{}
	for oi := fromOwner; oi < len(owners); oi++ {
		o := owners[oi]
		buckets, err := l.cat.Buckets(ctx, o.tableID, o.partitionID)
		if err != nil {
			if errors.Is(err, core.ErrNotFound) {
				continue // dropped under the listing
			}
			return nil, err
		}
		ras, err := l.cat.ReassignmentsOfOwner(ctx, catalog.BucketKey{TableID: o.tableID, PartitionID: o.partitionID})
		if err != nil {
			return nil, err
		}
		targets := map[int32][]int32{}
		for _, ra := range ras {
			targets[ra.Key.Bucket] = ra.Target
		}
		for _, b := range buckets {
			if oi == fromOwner && b.Bucket < fromBucket {
				continue
			}
			if len(out.Buckets) == size {
				out.NextPageToken = fmt.Sprintf("%d/%d", oi, b.Bucket)
				return out, nil
			}
			lai := b.LeaderAndIsr
			out.Buckets = append(out.Buckets, &adminv1.ListedBucket{TableId: o.tableID, PartitionId: o.partitionID, Partition: o.partition,
				Offline: lai.Leader == catalog.NoLeader || !alive[lai.Leader], TargetReplicas: targets[b.Bucket],
				Bucket: &adminv1.Bucket{Bucket: b.Bucket, Replicas: b.Replicas, Leader: lai.Leader, LeaderEpoch: lai.LeaderEpoch,
					Isr: lai.ISR, CoordinatorEpoch: lai.CoordinatorEpoch, BucketEpoch: lai.BucketEpoch}})
		}
	}
	return out, nil
}

// bucketOwner is a table or one of its partitions: what buckets belong to.
type bucketOwner struct {
	tableID, partitionID int64
	partition            string
}

// bucketOwners are the table's owners of buckets: the table itself, or its
// partitions (all, or only the one named), in name order.
func bucketOwners(ctx context.Context, l *leaderState, db, table, partition string) ([]bucketOwner, error) {
	info, err := l.cat.GetTable(ctx, db, table)
	if err != nil {
		return nil, err
	}
	id := info.Registration.TableID
	if len(info.Registration.PartitionKeys) == 0 {
		if partition != "" {
			return nil, &adminapi.FieldError{Field: "partition",
				Err: fmt.Errorf("%w: table %s.%s has no partitions (asked for partition %q)", core.ErrInvalidArgument, db, table, partition)}
		}
		return []bucketOwner{{tableID: id, partitionID: -1}}, nil
	}
	parts, err := l.cat.ListPartitions(ctx, db, table)
	if err != nil {
		return nil, err
	}
	var out []bucketOwner
	for _, p := range parts {
		if partition == "" || p.Name == partition {
			out = append(out, bucketOwner{tableID: id, partitionID: p.Registration.PartitionID, partition: p.Name})
		}
	}
	if partition != "" && len(out) == 0 {
		return nil, &catalog.NotFoundError{Kind: "partition", Name: db + "." + table + "/" + partition}
	}
	return out, nil
}

// maxElectedListed bounds the buckets ElectLeaders lists (it counts them
// all).
const maxElectedListed = 1000

// ElectLeaders runs a preferred or unclean election over one table's
// buckets or every bucket.
func (a *adminService) ElectLeaders(ctx context.Context, r *adminv1.ElectLeadersRequest) (*adminv1.ElectLeadersResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	if r.Type != adminv1.ElectionType_ELECTION_TYPE_PREFERRED && r.Type != adminv1.ElectionType_ELECTION_TYPE_UNCLEAN {
		return nil, &adminapi.FieldError{Field: "type",
			Err: fmt.Errorf("%w: election type %v: want PREFERRED or UNCLEAN", core.ErrInvalidArgument, r.Type)}
	}
	if (r.Database == "") != (r.Table == "") {
		return nil, &adminapi.FieldError{Field: "table",
			Err: fmt.Errorf("%w: give both a database and a table, or neither (every table)", core.ErrInvalidArgument)}
	}
	var keys []catalog.BucketKey // nil: every bucket, taken in the round
	if r.Table != "" {
		owners, err := bucketOwners(ctx, l, r.Database, r.Table, "")
		if err != nil {
			return nil, withField(err, tableFields)
		}
		for _, o := range owners {
			buckets, err := l.cat.Buckets(ctx, o.tableID, o.partitionID)
			if err != nil && !errors.Is(err, core.ErrNotFound) {
				return nil, err
			}
			for _, b := range buckets {
				keys = append(keys, catalog.BucketKey{TableID: o.tableID, PartitionID: o.partitionID, Bucket: b.Bucket})
			}
		}
	}
	out := &adminv1.ElectLeadersResponse{}
	var terr error
	err = l.ctl.submit(ctx, l.lead.Lost(), func(ctx context.Context, rd *round) {
		ks := keys
		if r.Table == "" {
			for _, b := range l.buckets.buckets {
				ks = append(ks, stateKey(b))
			}
		}
		recs, err := rd.load(ctx, ks)
		if err != nil {
			terr = err
			return
		}
		for _, b := range recs {
			if b == nil {
				continue
			}
			var rec catalog.LeaderAndIsr
			var ok, skip bool
			if r.Type == adminv1.ElectionType_ELECTION_TYPE_PREFERRED {
				var notEligible bool
				rec, ok, notEligible = electPreferred(b.rec, b.replicas, rd.lv)
				skip = !ok && !notEligible
			} else {
				rec, ok, skip = electUnclean(b.rec, b.replicas, rd.lv)
			}
			switch {
			case ok:
				out.ElectedCount++
				if len(out.Elected) < maxElectedListed {
					out.Elected = append(out.Elected, &adminv1.ElectedBucket{TableId: b.key.TableID, PartitionId: b.key.PartitionID,
						Bucket: b.key.Bucket, PreviousLeader: b.rec.Leader, Leader: rec.Leader, LeaderEpoch: rec.LeaderEpoch})
				}
				rd.stage(b, rec)
			case skip:
				out.Already++
			default:
				out.NotEligible++
			}
		}
	})
	if err == nil {
		err = terr
	}
	if err != nil {
		return nil, err
	}
	if out.ElectedCount > 0 {
		a.s.log.Info("leaders elected by an operator", "type", r.Type.String(), "elected", out.ElectedCount, "not_eligible", out.NotEligible)
	}
	return out, nil
}
