package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"
	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/harness"
	"github.com/metaplane/metaplane/internal/testutil"
)

// isrFailing is a memory client whose transactions that write a
// LeaderAndIsr record fail, while fail is set, before changing anything.
type isrFailing struct {
	*memory.Backend
	fail *atomic.Bool
}

func (b isrFailing) Txn(ctx context.Context, ops []core.Op, opts core.TxnOptions) (core.TxnResult, error) {
	if b.fail.Load() {
		for _, op := range ops {
			if strings.HasSuffix(op.Path, "/leader_isr") {
				return core.TxnResult{}, fmt.Errorf("%w: injected by the test", core.ErrUnavailable)
			}
		}
	}
	return b.Backend.Txn(ctx, ops, opts)
}

// TestAdjustIsrUnavailableCarriesNoRecord: an AdjustIsr whose write fails
// is answered UNAVAILABLE without a record (the record it meant to write
// was never written: answering it would tell the leader a state that is
// not the store's), and the bucket's record is unchanged; asked again once
// the store takes writes, the change is made.
func TestAdjustIsrUnavailableCarriesNoRecord(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	fail := &atomic.Bool{}
	a := harness.StartCoordinator(t, s, coordinator.Options{Open: func(ctx context.Context) (core.MetadataBackend, error) {
		return isrFailing{Backend: s.NewClient(core.ClientOptions{SessionTimeout: harness.SessionTimeout}), fail: fail}, nil
	}})
	testutil.WaitFor(t, 5*time.Second, "coordinator leads", a.Srv.IsLeader)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	c := newClient(t, a.Addr)
	for id := int32(1); id <= 2; id++ {
		startFakeTablet(t, id).register(t, ctx, c)
	}
	createBucketTable(t, ctx, c, 1, 2)
	var b0 = listBuckets(t, ctx, c, "db", "t")[0]
	testutil.WaitFor(t, 10*time.Second, "the bucket led with both replicas in sync", func() bool {
		b0 = listBuckets(t, ctx, c, "db", "t")[0]
		return b0.Bucket.Leader >= 0 && len(b0.Bucket.Isr) == 2
	})
	leader, le, be := b0.Bucket.Leader, b0.Bucket.LeaderEpoch, b0.Bucket.BucketEpoch

	fail.Store(true)
	res := adjustIsr(t, ctx, c, leader, b0, le, be, leader)
	fail.Store(false)
	if res.ErrorCode != adminapi.CodeUnavailable {
		t.Fatalf("AdjustIsr with the write failing: code %q (%s), want %s", res.ErrorCode, res.ErrorMessage, adminapi.CodeUnavailable)
	}
	if res.BucketEpoch != 0 || len(res.Isr) != 0 || res.Leader != 0 || res.LeaderEpoch != 0 {
		t.Fatalf("AdjustIsr answered UNAVAILABLE with a record (%v): the record after a failed write is not known", res)
	}
	if now := listBuckets(t, ctx, c, "db", "t")[0].Bucket; now.BucketEpoch != be || len(now.Isr) != 2 {
		t.Fatalf("the failed AdjustIsr changed the record: %v, want bucket epoch %d with both replicas", now, be)
	}
	if res := adjustIsr(t, ctx, c, leader, b0, le, be, leader); res.ErrorCode != "" || res.BucketEpoch != be+1 {
		t.Fatalf("AdjustIsr asked again: %v, want the change at bucket epoch %d", res, be+1)
	}
}
