package netfault

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/metaplane/metaplane/adminapi"
	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// The bucket part of the workload: two reference tablet servers run in the
// test's namespace (beside the clients, reached by the coordinators over
// the bridge) and replicate the one bucket of the table nf.isr. Clients
// read the bucket's record (ListBuckets) and ask, as its leader, for its
// ISR to be shrunk to the leader or grown back to both replicas
// (AdjustIsr at the record's leader and bucket epochs). The key
// "bucket/isr" is checked with the others: its state is the record's
// bucket epoch and ISR. The coordinator and the tablet servers change the
// record too (elections, the leader's own AdjustIsr), and those changes
// are not in the history, so the model lets a read or an answer show a
// later bucket epoch than the last one it knows of, never an earlier one,
// and lets an AdjustIsr apply only at a bucket epoch no later than the
// one it was asked at: a stale read, or an ISR change applied over a
// newer record, fails the check. An AdjustIsr that asks for the ISR the
// record already has is answered with the record as it is, at any bucket
// epoch (the coordinator's answer to a retry of a change made, as Kafka's
// controller answers an AlterPartition it finds already applied); the
// model takes that too.

// Bucket op kinds and the bucket key.
const (
	OpIsrGet    = "isr-get"
	OpIsrAdjust = "isr-adjust"
	// IsrTable is the table (in Database) whose bucket the clients adjust.
	IsrTable = "isr"
	isrKey   = "bucket/" + IsrTable
)

// StartTabletServers starts reference tablet servers with ids in the
// test's own namespace, listening on the bridge address, with settings
// (-D; the backend's: coordinator.seed.nodes for Raft, zookeeper.address
// for ZooKeeper).
func (nt *Net) StartTabletServers(ids []int32, settings ...string) []*Proc {
	t := nt.t
	t.Helper()
	bin := testutil.Binary(t, "metaplane")
	var ps []*Proc
	for _, id := range ids {
		args := []string{"tablet-server", "--no-env", "--log-level", logLevel(),
			"--id", strconv.Itoa(int(id)), "--listen", nt.RootIP + ":0",
			"-D", "metadata.backend.plugin.dir=" + filepath.Dir(bin),
			"-D", "metrics.address=127.0.0.1:0"}
		for _, s := range settings {
			args = append(args, "-D", s)
		}
		ps = append(ps, nt.Start(nil, fmt.Sprintf("tablet server %d", id), bin, args...))
	}
	return ps
}

// isrRecord is the bucket's record as an answer shows it.
type isrRecord struct {
	leader, leaderEpoch, bucketEpoch int32
	isr                              []int32
	replicas                         []int32
	tableID                          int64
}

// isrString is an ISR as a comparable value (sorted ids).
func isrString(isr []int32) string {
	s := slices.Clone(isr)
	slices.Sort(s)
	parts := make([]string, len(s))
	for i, r := range s {
		parts[i] = strconv.Itoa(int(r))
	}
	return strings.Join(parts, ",")
}

// SetUpIsr creates the table nf.isr (one bucket, both tablet servers its
// replicas) once n tablet servers are registered, and waits until its
// bucket has a leader.
func SetUpIsr(ctx context.Context, admin *adminclient.Client, n int) error {
	err := waitFor(ctx, func(ctx context.Context) (bool, error) {
		var got int
		err := admin.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			r, err := a.ListTabletServers(ctx, &adminv1.ListTabletServersRequest{})
			got = len(r.GetServers())
			return err
		})
		return got >= n, err
	})
	if err != nil {
		return fmt.Errorf("%d tablet servers registered: %w", n, err)
	}
	err = admin.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.CreateTable(ctx, &adminv1.CreateTableRequest{Database: Database, Table: IsrTable, IgnoreIfExists: true,
			Descriptor_: &adminv1.TableDescriptor{Columns: []*adminv1.Column{{Name: "id", Type: "BIGINT"}}, BucketCount: 1, ReplicationFactor: int32(n)}})
		return err
	})
	if err != nil {
		return fmt.Errorf("create %s.%s: %w", Database, IsrTable, err)
	}
	err = waitFor(ctx, func(ctx context.Context) (bool, error) {
		rec, err := readIsr(ctx, admin)
		return err == nil && rec.leader >= 0 && len(rec.isr) == n, nil
	})
	if err != nil {
		return fmt.Errorf("a leader and a full ISR for %s.%s: %w", Database, IsrTable, err)
	}
	return nil
}

// waitFor polls cond every 100 ms until it holds or ctx ends.
func waitFor(ctx context.Context, cond func(ctx context.Context) (bool, error)) error {
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ok, err := cond(cctx)
		cancel()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
			}
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// readIsr reads the bucket's record through ListBuckets.
func readIsr(ctx context.Context, cl *adminclient.Client) (isrRecord, error) {
	var rec isrRecord
	err := cl.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		r, err := a.ListBuckets(ctx, &adminv1.ListBucketsRequest{Database: Database, Table: IsrTable})
		if err != nil {
			return err
		}
		if len(r.GetBuckets()) != 1 {
			return fmt.Errorf("%s.%s lists %d buckets, want 1", Database, IsrTable, len(r.GetBuckets()))
		}
		lb := r.GetBuckets()[0]
		b := lb.GetBucket()
		rec = isrRecord{leader: b.GetLeader(), leaderEpoch: b.GetLeaderEpoch(), bucketEpoch: b.GetBucketEpoch(),
			isr: b.GetIsr(), replicas: b.GetReplicas(), tableID: lb.GetTableId()}
		return nil
	})
	return rec, err
}

// isr reads the bucket's record (recorded as a read), then asks as its
// leader for the ISR to shrink to the leader, or to grow back to every
// replica (recorded as a write). It returns whether both were answered.
func (c *Client) isr(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, c.CallTimeout)
	defer cancel()
	call := c.H.now()
	rec, err := readIsr(cctx, c.C)
	if err != nil {
		return false // a read that failed says nothing
	}
	c.H.record(c.ID, keyInput{Op: OpIsrGet, Key: isrKey}, keyOutput{OK: true, Epoch: rec.bucketEpoch, Isr: isrString(rec.isr)}, call)
	if rec.leader < 0 {
		return true // no leader to act as
	}
	want := []int32{rec.leader}
	if len(rec.isr) < len(rec.replicas) {
		want = rec.replicas
	}
	in := keyInput{Op: OpIsrAdjust, Key: isrKey, Expect: rec.bucketEpoch, NewIsr: isrString(want)}
	actx, acancel := context.WithTimeout(ctx, c.CallTimeout)
	defer acancel()
	call = c.H.now()
	var res *adminv1.AdjustIsrResponse_Result
	err = c.C.Tablets(actx, func(ctx context.Context, t adminv1.TabletServerServiceClient) error {
		r, err := t.AdjustIsr(ctx, &adminv1.AdjustIsrRequest{ServerId: rec.leader, Buckets: []*adminv1.AdjustIsrRequest_Bucket{{
			TableId: rec.tableID, PartitionId: -1, Bucket: 0,
			LeaderEpoch: rec.leaderEpoch, BucketEpoch: rec.bucketEpoch, NewIsr: want}}})
		if err != nil {
			return err
		}
		if len(r.GetResults()) != 1 {
			return fmt.Errorf("AdjustIsr answered %d results for 1 bucket", len(r.GetResults()))
		}
		res = r.GetResults()[0]
		return nil
	})
	var out keyOutput
	switch {
	case err != nil:
		out = keyOutput{Unknown: true}
	case res.GetErrorCode() == adminapi.CodeUnavailable:
		// The change's write failed: its outcome is unknown.
		out = keyOutput{Unknown: true}
	case res.GetErrorCode() == "":
		out = keyOutput{OK: true, Epoch: res.GetBucketEpoch(), Isr: isrString(res.GetIsr())}
	case res.GetBucketEpoch() > 0:
		// Refused, with the record as it stands.
		out = keyOutput{Epoch: res.GetBucketEpoch(), Isr: isrString(res.GetIsr()), Code: res.GetErrorCode()}
	default:
		// Refused without a record: says nothing of the state.
		out = keyOutput{Code: res.GetErrorCode()}
	}
	c.H.record(c.ID, in, out, call)
	return !out.Unknown
}

// isrStep is the model's step for the bucket key (see the top of the
// file): s is the last record known (epoch 0: none known yet).
func isrStep(s keyState, in keyInput, out keyOutput) []any {
	// shows reports whether a record at epoch e with ISR isr may be the
	// state after s (the same record, or a later one made outside the
	// history).
	shows := func(e int32, isr string) bool {
		return s.epoch == 0 || e > s.epoch || (e == s.epoch && isr == s.isr)
	}
	next := keyState{epoch: out.Epoch, isr: out.Isr}
	switch in.Op {
	case OpIsrGet:
		if shows(out.Epoch, out.Isr) {
			return []any{next}
		}
		return nil
	case OpIsrAdjust:
		applies := s.epoch == 0 || s.epoch <= in.Expect
		switch {
		case out.Unknown:
			if applies {
				return []any{s, keyState{epoch: in.Expect + 1, isr: in.NewIsr}}
			}
			return []any{s}
		case out.OK:
			if applies && out.Epoch == in.Expect+1 && out.Isr == in.NewIsr {
				return []any{next}
			}
			// A request for the ISR the record already has (a leader's
			// retry of a change made, or here another client's request
			// for the same ISR) is answered with the record as it is, at
			// whatever bucket epoch: nothing is written.
			if out.Isr == in.NewIsr && shows(out.Epoch, out.Isr) {
				return []any{next}
			}
			return nil
		case out.Epoch > 0:
			if shows(out.Epoch, out.Isr) {
				return []any{next}
			}
			return nil
		default:
			return []any{s}
		}
	}
	return nil
}
