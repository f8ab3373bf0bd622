package catalog

import (
	"context"
	"fmt"
	"slices"

	"github.com/metaplane/metaplane/core"
)

// BucketKey names one bucket: its table, its partition (-1: a table
// without partitions) and its number. A partition's bucket is found by
// its partition id alone; TableID is then informational.
type BucketKey struct {
	TableID     int64
	PartitionID int64
	Bucket      int32
}

// Path is the bucket's LeaderAndIsr path.
func (k BucketKey) Path() string { return LeaderAndIsrPath(k.TableID, k.PartitionID, k.Bucket) }

// AssignmentPath is the path of the table's or partition's assignment
// the bucket belongs to.
func (k BucketKey) AssignmentPath() string {
	if k.PartitionID >= 0 {
		return PartitionAssignmentPath(k.PartitionID)
	}
	return TableAssignmentPath(k.TableID)
}

func (k BucketKey) String() string {
	if k.PartitionID >= 0 {
		return fmt.Sprintf("table %d partition %d bucket %d", k.TableID, k.PartitionID, k.Bucket)
	}
	return fmt.Sprintf("table %d bucket %d", k.TableID, k.Bucket)
}

// LeaderAndIsrUpdate is one bucket's new LeaderAndIsr, written over the
// record at Version (the node version it was read at).
type LeaderAndIsrUpdate struct {
	Key     BucketKey
	Version int64
	Record  LeaderAndIsr
}

// MaxLeaderAndIsrBatch is the most LeaderAndIsr records one transaction of
// UpdateLeaderAndIsr writes: about 100 KB, well inside ZooKeeper's 1 MB
// request limit (jute.maxbuffer) and the plugin's messages.
const MaxLeaderAndIsrBatch = 500

// UpdateLeaderAndIsr writes updates, each a version-checked set of the
// bucket's LeaderAndIsr record, in fenced transactions of at most
// MaxLeaderAndIsrBatch records (one round trip per batch, not per bucket).
// Every record is written with coordinator_epoch = Options.Epoch. A batch
// is all or nothing; batches are written in order, and the first that
// fails stops the call: written counts the updates of the batches before
// it, which took effect. Errors: ErrBadVersion or ErrNotFound (a record
// changed or went since it was read: read again and decide again),
// ErrFenced (the leadership is lost), backend errors. updates is not
// retained.
func (c *Catalog) UpdateLeaderAndIsr(ctx context.Context, updates []LeaderAndIsrUpdate) (written int, err error) {
	for start := 0; start < len(updates); start += MaxLeaderAndIsrBatch {
		batch := updates[start:min(start+MaxLeaderAndIsrBatch, len(updates))]
		ops := make([]core.Op, len(batch))
		for i, u := range batch {
			r := u.Record
			r.CoordinatorEpoch = int32(c.opts.Epoch)
			if r.ISR == nil {
				r.ISR = []int32{}
			}
			if r.StandbyReplicas == nil {
				r.StandbyReplicas = []int32{}
			}
			ops[i] = core.SetOp(u.Key.Path(), r.Marshal(), u.Version)
		}
		if _, err := c.txn(ctx, ops); err != nil {
			if i := core.FailedOpIndex(err); i >= 0 && i < len(batch) {
				err = fmt.Errorf("leader and isr of %s: %w", batch[i].Key, err)
			}
			return written, err
		}
		written += len(batch)
	}
	return written, nil
}

// ReplicasOf returns the replicas the assignment node n (a table's or a
// partition's, as BucketKey.AssignmentPath names it) gives bucket, through
// the decode cache; nil when n does not name the bucket. Errors:
// ErrBadRecord.
func (c *Catalog) ReplicasOf(n core.Node, partitioned bool, bucket int32) ([]int32, error) {
	if partitioned {
		a, err := cached(&c.cache, n, UnmarshalPartitionAssignment)
		return a.Buckets[bucket], err
	}
	a, err := cached(&c.cache, n, UnmarshalTableAssignment)
	return a.Buckets[bucket], err
}

// SameReplicas reports whether a and b hold the same replica ids, in any
// order.
func SameReplicas(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}
