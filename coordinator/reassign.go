package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// Bucket reassignment, the original's way (ReassignmentLeaderElection):
// the new replicas are added to the bucket's assignment (new first, then
// the old ones that stay), and a reassignment node records the target
// and the original list. The leader tablet server takes the new replicas
// into the ISR as they catch up (AdjustIsr). Once every new replica is in
// the ISR, a controller round moves leadership to the first replica of
// the target that is eligible and in the ISR (when the leader is not in
// the target), shrinks the ISR to the target, and then writes the
// assignment as the target and removes the node. Cancelling writes the
// original list back the same way.

// assignEdit is a round's pending change of one table's or partition's
// assignment: buckets' new replica lists, and reassignment nodes to
// create or delete with it, in one transaction.
type assignEdit struct {
	key     catalog.BucketKey // an owner's key (any bucket of it)
	buckets map[int32][]int32
	ops     []core.Op
}

// editAssignment returns the round's pending edit of k's owner.
func (r *round) editAssignment(k catalog.BucketKey) *assignEdit {
	if r.edits == nil {
		r.edits = map[string]*assignEdit{}
	}
	p := k.AssignmentPath()
	e, ok := r.edits[p]
	if !ok {
		e = &assignEdit{key: k, buckets: map[int32][]int32{}}
		r.edits[p] = e
		r.editOrder = append(r.editOrder, p)
	}
	return e
}

// writeEdits writes the round's assignment edits, one transaction per
// owner, each over the assignment as the image holds it now (after the
// round's LeaderAndIsr writes).
func (r *round) writeEdits(ctx context.Context) error {
	var first error
	for _, p := range r.editOrder {
		e := r.edits[p]
		a, err := r.l.cat.ReadAssignment(ctx, e.key)
		if errors.Is(err, core.ErrNotFound) {
			// The table or partition was dropped: its reassignment nodes
			// go alone.
			var ops []core.Op
			for _, op := range e.ops {
				if op.Type == core.OpDelete {
					ops = append(ops, op)
				}
			}
			if len(ops) > 0 {
				err = r.l.cat.WriteReassignment(ctx, ops)
			}
			if err != nil && first == nil {
				first = err
			}
			continue
		}
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		for b, reps := range e.buckets {
			if _, ok := a.Buckets[b]; ok {
				a.Buckets[b] = reps
			}
		}
		if err := r.l.cat.WriteReassignment(ctx, append([]core.Op{a.Op()}, e.ops...)); err != nil && first == nil {
			first = fmt.Errorf("reassignment of %s: %w", p, err)
		}
	}
	return first
}

// progressReassignments finishes the reassignments whose new replicas
// are all in the ISR, and forgets those of buckets that are gone.
func (s *Server) progressReassignments(ctx context.Context, l *leaderState, r *round) error {
	ras, err := l.cat.Reassignments(ctx)
	if err != nil || len(ras) == 0 {
		return err
	}
	keys := make([]catalog.BucketKey, len(ras))
	for i, ra := range ras {
		keys[i] = ra.Key
	}
	recs, err := r.load(ctx, keys)
	if err != nil {
		return err
	}
	for i, ra := range ras {
		b := recs[i]
		if b == nil {
			e := r.editAssignment(ra.Key)
			e.ops = append(e.ops, core.DeleteOp(ra.Key.ReassignmentPath(), core.AnyVersion))
			continue
		}
		if r.cancelled[ra.Key.ReassignmentPath()] {
			continue
		}
		if rec, ok := finishReassignment(b.rec, ra.Target, r.lv); ok {
			if !sameRecord(rec, b.rec) {
				r.stage(b, rec)
			}
			e := r.editAssignment(ra.Key)
			e.buckets[ra.Key.Bucket] = slices.Clone(ra.Target)
			e.ops = append(e.ops, core.DeleteOp(ra.Key.ReassignmentPath(), core.AnyVersion))
			s.log.Info("bucket reassignment done", "bucket", ra.Key.String(), "replicas", ra.Target, "leader", rec.Leader)
		}
	}
	return nil
}

// finishReassignment is rec once a reassignment to target ends: leader a
// member of target (kept when it is one and eligible, else the first of
// target that is eligible and in the ISR), the ISR reduced to target's
// members. ok is false while a member of target is not in the ISR yet, or
// no member of it can lead.
func finishReassignment(rec catalog.LeaderAndIsr, target []int32, lv liveness) (catalog.LeaderAndIsr, bool) {
	for _, t := range target {
		if !slices.Contains(rec.ISR, t) {
			return rec, false
		}
	}
	leader := rec.Leader
	if !slices.Contains(target, leader) || !lv.alive[leader] {
		leader = firstEligible(target, rec.ISR, lv.eligible)
		if leader == catalog.NoLeader {
			return rec, false
		}
	}
	isr := withoutServers(rec.ISR, func(r int32) bool { return !slices.Contains(target, r) })
	if leader == rec.Leader && slices.Equal(isr, rec.ISR) {
		return rec, true
	}
	return withLeader(rec, leader, isr), true
}

// cancelReassignment is rec once a reassignment back to original is
// undone: the ISR reduced to original's members, the leader kept when it
// is one of them and alive, else the first of original that is eligible
// and in the ISR. ok is false when no member of original is in the ISR.
func cancelReassignment(rec catalog.LeaderAndIsr, original []int32, lv liveness) (catalog.LeaderAndIsr, bool) {
	isr := withoutServers(rec.ISR, func(r int32) bool { return !slices.Contains(original, r) })
	if len(isr) == 0 {
		return rec, false
	}
	leader := rec.Leader
	if !slices.Contains(isr, leader) || !lv.alive[leader] {
		leader = firstEligible(original, isr, lv.eligible)
		if leader == catalog.NoLeader {
			leader = firstEligible(original, isr, func(id int32) bool { return lv.alive[id] })
		}
		if leader == catalog.NoLeader {
			return rec, false
		}
	}
	if leader == rec.Leader && slices.Equal(isr, rec.ISR) {
		return rec, true
	}
	return withLeader(rec, leader, isr), true
}

// ReassignBuckets starts (or cancels) bucket reassignments.
func (a *adminService) ReassignBuckets(ctx context.Context, r *adminv1.ReassignBucketsRequest) (*adminv1.ReassignBucketsResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	bad := func(field, format string, args ...any) error {
		return &adminapi.FieldError{Field: field, Err: fmt.Errorf("%w: "+format, append([]any{core.ErrInvalidArgument}, args...)...)}
	}
	owners, err := bucketOwners(ctx, l, r.Database, r.Table, r.Partition)
	if err != nil {
		return nil, withField(err, tableFields)
	}
	if len(owners) != 1 {
		return nil, bad("partition", "table %s.%s is partitioned: name the partition whose buckets to reassign", r.Database, r.Table)
	}
	o := owners[0]
	owner := catalog.BucketKey{TableID: o.tableID, PartitionID: o.partitionID}
	if !r.Cancel && len(r.Targets) == 0 {
		return nil, bad("targets", "no bucket to reassign: give at least one bucket and its new replicas")
	}
	current, err := l.cat.ReadAssignment(ctx, owner)
	if err != nil {
		return nil, err
	}
	alive := map[int32]bool{}
	ids, err := l.cat.TabletServerIDs(ctx)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		alive[id] = true
	}
	seen := map[int32]bool{}
	for _, t := range r.Targets {
		if _, ok := current.Buckets[t.Bucket]; !ok {
			return nil, bad("targets", "%s.%s has no bucket %d (buckets 0 to %d)", r.Database, r.Table, t.Bucket, len(current.Buckets)-1)
		}
		if seen[t.Bucket] {
			return nil, bad("targets", "bucket %d is named twice", t.Bucket)
		}
		seen[t.Bucket] = true
		if r.Cancel {
			continue
		}
		if len(t.Replicas) == 0 {
			return nil, bad("targets", "bucket %d: the new replica list is empty", t.Bucket)
		}
		dup := map[int32]bool{}
		for _, rep := range t.Replicas {
			if dup[rep] {
				return nil, bad("targets", "bucket %d: replica %d is named twice in %v", t.Bucket, rep, t.Replicas)
			}
			dup[rep] = true
			if !alive[rep] {
				return nil, bad("targets", "bucket %d: tablet server %d is not registered (registered: %v); nothing was started", t.Bucket, rep, ids)
			}
		}
	}
	out := &adminv1.ReassignBucketsResponse{}
	var terr error
	err = l.ctl.submit(ctx, l.lead.Lost(), func(ctx context.Context, rd *round) {
		out.Started, out.Unchanged, out.Cancelled = 0, 0, 0
		inProgress := map[int32]catalog.Reassignment{}
		ras, err := l.cat.ReassignmentsOfOwner(ctx, owner)
		if err != nil {
			terr = err
			return
		}
		for _, ra := range ras {
			inProgress[ra.Key.Bucket] = ra.Reassignment
		}
		a, err := l.cat.ReadAssignment(ctx, owner)
		if err != nil {
			terr = err
			return
		}
		if r.Cancel {
			terr = rd.cancelReassignments(ctx, owner, r.Targets, inProgress, out)
			return
		}
		for _, t := range r.Targets {
			if ra, ok := inProgress[t.Bucket]; ok {
				if catalog.SameReplicas(ra.Target, t.Replicas) {
					out.Unchanged++
					continue
				}
				terr = fmt.Errorf("%w: bucket %d is being reassigned to %v already: wait for it, or cancel it first", core.ErrInvalidArgument, t.Bucket, ra.Target)
				return
			}
			orig := a.Buckets[t.Bucket]
			if catalog.SameReplicas(orig, t.Replicas) {
				out.Unchanged++
				continue
			}
			union := slices.Clone(t.Replicas)
			for _, rep := range orig {
				if !slices.Contains(union, rep) {
					union = append(union, rep)
				}
			}
			k := catalog.BucketKey{TableID: owner.TableID, PartitionID: owner.PartitionID, Bucket: t.Bucket}
			e := rd.editAssignment(k)
			e.buckets[t.Bucket] = union
			ra := catalog.Reassignment{TableID: a.TableID, Target: slices.Clone(t.Replicas), Original: slices.Clone(orig)}
			e.ops = append(e.ops, core.CreateOp(k.ReassignmentPath(), ra.Marshal(), core.Persistent).WithParents())
			out.Started++
		}
	})
	if err == nil {
		err = terr
	}
	if err != nil {
		return nil, err
	}
	if out.Started+out.Cancelled > 0 {
		a.s.log.Info("bucket reassignment", "table", r.Database+"."+r.Table, "partition", r.Partition, "started", out.Started, "cancelled", out.Cancelled)
	}
	return out, nil
}

// cancelReassignments stages the undoing of owner's reassignments in
// progress (of targets' buckets, or all when targets is empty).
func (rd *round) cancelReassignments(ctx context.Context, owner catalog.BucketKey, targets []*adminv1.ReassignBucketsRequest_Target,
	inProgress map[int32]catalog.Reassignment, out *adminv1.ReassignBucketsResponse) error {
	var buckets []int32
	if len(targets) == 0 {
		for b := range inProgress {
			buckets = append(buckets, b)
		}
		slices.Sort(buckets)
	} else {
		for _, t := range targets {
			buckets = append(buckets, t.Bucket)
		}
	}
	for _, bn := range buckets {
		ra, ok := inProgress[bn]
		if !ok {
			out.Unchanged++
			continue
		}
		k := catalog.BucketKey{TableID: owner.TableID, PartitionID: owner.PartitionID, Bucket: bn}
		recs, err := rd.load(ctx, []catalog.BucketKey{k})
		if err != nil {
			return err
		}
		e := rd.editAssignment(k)
		if b := recs[0]; b != nil {
			rec, ok := cancelReassignment(b.rec, ra.Original, rd.lv)
			if !ok {
				return fmt.Errorf("%w: bucket %d: no replica of its original list %v is in the ISR %v: its leadership cannot go back; let the reassignment finish",
					core.ErrInvalidArgument, bn, ra.Original, b.rec.ISR)
			}
			if !sameRecord(rec, b.rec) {
				rd.stage(b, rec)
			}
		}
		e.buckets[bn] = slices.Clone(ra.Original)
		e.ops = append(e.ops, core.DeleteOp(k.ReassignmentPath(), core.AnyVersion))
		if rd.cancelled == nil {
			rd.cancelled = map[string]bool{}
		}
		rd.cancelled[k.ReassignmentPath()] = true
		out.Cancelled++
	}
	return nil
}
