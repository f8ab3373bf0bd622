package catalog

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/metaplane/metaplane/core"
)

// A bucket reassignment in progress is a node of metaplane's own,
// /metaplane/reassignments/tables/<tableId>/<bucket> (or
// .../partitions/<partitionId>/<bucket>), holding the target replicas and
// the original ones, while the bucket's assignment lists both (the new
// replicas are added first; the coordinator's controller removes the old
// ones once the new ones are in the ISR).
const (
	ReassignmentsPath          = RequestsRoot + "/reassignments"
	TableReassignmentsPath     = ReassignmentsPath + "/tables"
	PartitionReassignmentsPath = ReassignmentsPath + "/partitions"
)

// ReassignmentsOf is the node under which owner k's (its table's or
// partition's) reassignments are kept.
func (k BucketKey) ReassignmentsOf() string {
	if k.PartitionID >= 0 {
		return core.JoinPath(PartitionReassignmentsPath, strconv.FormatInt(k.PartitionID, 10))
	}
	return core.JoinPath(TableReassignmentsPath, strconv.FormatInt(k.TableID, 10))
}

// ReassignmentPath is bucket k's reassignment node.
func (k BucketKey) ReassignmentPath() string {
	return core.JoinPath(k.ReassignmentsOf(), strconv.Itoa(int(k.Bucket)))
}

// Reassignment is a bucket reassignment in progress.
type Reassignment struct {
	TableID  int64
	Target   []int32
	Original []int32
}

// Marshal encodes the record (version 1).
func (r Reassignment) Marshal() []byte {
	var w jw
	w.open('{')
	w.fieldInt("version", 1)
	w.fieldInt("table_id", r.TableID)
	w.fieldInts("target", r.Target)
	w.fieldInts("original", r.Original)
	w.close('}')
	return w.bytes()
}

// UnmarshalReassignment decodes a Reassignment.
func UnmarshalReassignment(b []byte) (Reassignment, error) {
	var v struct {
		Version  int     `json:"version"`
		TableID  int64   `json:"table_id"`
		Target   []int32 `json:"target"`
		Original []int32 `json:"original"`
	}
	if err := decode(b, &v, "reassignment", 1, 1, &v.Version); err != nil {
		return Reassignment{}, err
	}
	return Reassignment{TableID: v.TableID, Target: v.Target, Original: v.Original}, nil
}

// BucketAssignment is a table's or partition's assignment node as read,
// decoded: the buckets' replicas, and what writing it back needs.
type BucketAssignment struct {
	Node        core.Node
	Partitioned bool
	TableID     int64
	Buckets     map[int32][]int32
}

// ReadAssignment reads owner k's assignment (through the catalog's
// reader). The Buckets map is a copy the caller may change. Errors:
// ErrNotFound, ErrBadRecord, backend errors.
func (c *Catalog) ReadAssignment(ctx context.Context, k BucketKey) (BucketAssignment, error) {
	n, err := core.Get(ctx, c.r, k.AssignmentPath())
	if err != nil {
		return BucketAssignment{}, err
	}
	out := BucketAssignment{Node: n, Partitioned: k.PartitionID >= 0, TableID: k.TableID, Buckets: map[int32][]int32{}}
	var buckets map[int32][]int32
	if out.Partitioned {
		a, err := cached(&c.cache, n, UnmarshalPartitionAssignment)
		if err != nil {
			return out, err
		}
		out.TableID, buckets = a.TableID, a.Buckets
	} else {
		a, err := cached(&c.cache, n, UnmarshalTableAssignment)
		if err != nil {
			return out, err
		}
		buckets = a.Buckets
	}
	for b, r := range buckets {
		out.Buckets[b] = append([]int32(nil), r...)
	}
	return out, nil
}

// Op is the version-checked set that writes a back.
func (a BucketAssignment) Op() core.Op {
	var data []byte
	if a.Partitioned {
		data = PartitionAssignment{TableID: a.TableID, Buckets: a.Buckets}.Marshal()
	} else {
		data = TableAssignment{Buckets: a.Buckets}.Marshal()
	}
	return core.SetOp(a.Node.Path, data, a.Node.Stat.Version)
}

// WriteReassignment writes ops (an assignment's set and reassignment
// nodes' creates and deletes) in one fenced transaction. Errors:
// ErrBadVersion, ErrNodeExists, ErrNotFound (something changed since it
// was read: read again), ErrFenced, backend errors.
func (c *Catalog) WriteReassignment(ctx context.Context, ops []core.Op) error {
	for _, op := range ops {
		if op.Path != ReassignmentsPath && !core.HasPrefixPath(op.Path, ReassignmentsPath) &&
			!core.HasPrefixPath(op.Path, TableAssignmentsPath) && !core.HasPrefixPath(op.Path, PartitionAssignsPath) {
			return fmt.Errorf("%w: a reassignment writes assignments and reassignment nodes only, not %s", core.ErrInvalidArgument, op.Path)
		}
	}
	_, err := c.txn(ctx, ops)
	return err
}

// BucketReassignment is one bucket's reassignment in progress.
type BucketReassignment struct {
	Key BucketKey
	Reassignment
}

// Reassignments returns every reassignment in progress from the catalog's
// reader.
func (c *Catalog) Reassignments(ctx context.Context) ([]BucketReassignment, error) {
	var out []BucketReassignment
	for _, root := range []string{TableReassignmentsPath, PartitionReassignmentsPath} {
		owners, _, err := c.r.Children(ctx, root, core.ReadOptions{})
		if errors.Is(err, core.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, o := range owners {
			id, err := strconv.ParseInt(o, 10, 64)
			if err != nil {
				continue
			}
			k := BucketKey{TableID: id, PartitionID: -1}
			if root == PartitionReassignmentsPath {
				k = BucketKey{TableID: -1, PartitionID: id}
			}
			got, err := c.ReassignmentsOfOwner(ctx, k)
			if err != nil {
				return nil, err
			}
			out = append(out, got...)
		}
	}
	return out, nil
}

// ReassignmentsOfOwner returns the reassignments in progress of owner k's
// buckets (k.Bucket is ignored), in no particular order.
func (c *Catalog) ReassignmentsOfOwner(ctx context.Context, k BucketKey) ([]BucketReassignment, error) {
	dir := k.ReassignmentsOf()
	names, _, err := c.r.Children(ctx, dir, core.ReadOptions{})
	if errors.Is(err, core.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	paths := make([]string, 0, len(names))
	var keys []BucketKey
	for _, n := range names {
		b, err := strconv.ParseInt(n, 10, 32)
		if err != nil {
			continue
		}
		bk := BucketKey{TableID: k.TableID, PartitionID: k.PartitionID, Bucket: int32(b)}
		keys = append(keys, bk)
		paths = append(paths, bk.ReassignmentPath())
	}
	res, err := c.readShared(ctx, paths)
	if err != nil {
		return nil, err
	}
	out := make([]BucketReassignment, 0, len(keys))
	for i, r := range res {
		if r.Err != nil {
			continue
		}
		ra, err := cached(&c.cache, r.Node, UnmarshalReassignment)
		if err != nil {
			continue
		}
		bk := keys[i]
		if bk.PartitionID >= 0 {
			bk.TableID = ra.TableID
		}
		out = append(out, BucketReassignment{Key: bk, Reassignment: ra})
	}
	return out, nil
}
