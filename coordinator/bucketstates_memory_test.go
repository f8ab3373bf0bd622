package coordinator

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/image"
)

// bucketStatesMemory loads tables of two partitions of three buckets (a
// LeaderAndIsr record each, an ISR of three of five servers) into an
// image, builds bucket states from it and returns the heap the states
// alone hold per bucket (the image's own memory not counted).
func bucketStatesMemory(t testing.TB, buckets int) (perBucket float64, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := memoryBackend(t)
	var ops []core.Op
	flush := func() {
		if len(ops) == 0 {
			return
		}
		if _, err := b.Txn(ctx, ops, core.TxnOptions{}); err != nil {
			t.Fatal(err)
		}
		ops = ops[:0]
	}
	add := func(p string, data []byte) {
		ops = append(ops, core.CreateOp(p, data, core.Persistent).WithParents())
		if len(ops) == 500 {
			flush()
		}
	}
	pid := int64(0)
	for tb := int64(1); n < buckets; tb++ {
		add(catalog.TableAssignmentPath(tb), nil)
		for p := 0; p < 2; p++ {
			pid++
			add(catalog.PartitionAssignmentPath(pid), catalog.PartitionAssignment{TableID: tb}.Marshal())
			for bk := int32(0); bk < 3; bk++ {
				r := int32(n % 5)
				rec := catalog.LeaderAndIsr{Leader: r, LeaderEpoch: 1, ISR: []int32{r, (r + 1) % 5, (r + 2) % 5}, BucketEpoch: 1}
				add(catalog.LeaderAndIsrPath(tb, pid, bk), rec.Marshal())
				n++
			}
		}
	}
	flush()
	img := image.New(image.Options{Prefix: "/"})
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); img.Run(rctx, b) }()
	defer func() { rcancel(); <-done }()
	if err := img.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cat := catalog.New(b, catalog.Options{})
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s := newBucketStates()
	if err := s.refresh(ctx, cat, img); err != nil {
		t.Fatal(err)
	}
	per := s.perServer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := len(s.buckets); got != n {
		t.Fatalf("the states hold %d buckets, want %d", got, n)
	}
	listed := 0
	for _, l := range per {
		listed += len(l)
	}
	if listed != 3*n {
		t.Fatalf("the replicas' lists hold %d entries, want %d (three replicas a bucket)", listed, 3*n)
	}
	runtime.KeepAlive(s)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n), n
}

// TestBucketStatesBytesPerBucket holds the bucket states' heap per bucket
// (every coordinator keeps them, the standbys too: issue 34's image
// target counts them).
func TestBucketStatesBytesPerBucket(t *testing.T) {
	per, n := bucketStatesMemory(t, 30000)
	t.Logf("bucket states: %.0f bytes of heap per bucket (%d buckets)", per, n)
	if per > 500 {
		t.Errorf("bucket states hold %.0f bytes per bucket, want at most 500", per)
	}
}
