package image_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/image"
)

// imageMemory loads a Fluss-shaped tree of about n nodes (tables of two
// partitions of three buckets: schema, assignments, LeaderAndIsr, ~200
// bytes of data a leaf) into an image from a memory store, drops the
// store, and returns the heap the image alone holds per node and the
// nodes' paths and data per node.
func imageMemory(t testing.TB, n int) (heapPerNode, dataPerNode float64, nodes int) {
	t.Helper()
	ctx := context.Background()
	data := []byte(`{"version":1,"schema_id":1,"bucket_count":3,"properties":{"table.replication.factor":"3"},"custom_properties":{},"comment":"bench table","created_time":1700000000000,"modified_time":1700000000000}`)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	s := memory.NewStore(memory.StoreOptions{HistoryRetention: 1})
	w := s.NewClient(core.ClientOptions{})
	var ops []core.Op
	flush := func() {
		if len(ops) == 0 {
			return
		}
		if _, err := w.Txn(ctx, ops, core.TxnOptions{}); err != nil {
			t.Fatal(err)
		}
		ops = ops[:0]
	}
	add := func(p string) {
		ops = append(ops, core.CreateOp(p, data, core.Persistent).WithParents())
		if len(ops) == 500 {
			flush()
		}
	}
	pid := 0
	for tb := 1; tb*23 < n; tb++ { // 23 nodes a table, parents included
		add(fmt.Sprintf("/metadata/databases/bench/tables/t%05d/schemas/1", tb))
		add(fmt.Sprintf("/tabletservers/tables/%d", tb))
		for p := 0; p < 2; p++ {
			pid++
			add(fmt.Sprintf("/metadata/databases/bench/tables/t%05d/partitions/p%d", tb, p))
			add(fmt.Sprintf("/tabletservers/partitions/%d", pid))
			for b := 0; b < 3; b++ {
				add(fmt.Sprintf("/tabletservers/partitions/%d/buckets/%d/leader_isr", pid, b))
			}
		}
	}
	flush()
	w.Close()

	im := image.New(image.Options{})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	c := s.NewClient(core.ClientOptions{})
	go func() { defer close(done); im.Run(rctx, c) }()
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	if err := im.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	c.Close()
	s.Close()
	s, w, c = nil, nil, nil
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)

	nodes = im.Len()
	snap, err := im.Snapshot(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	var bytes int
	for _, nd := range snap.Nodes {
		bytes += len(nd.Path) + len(nd.Data)
	}
	runtime.KeepAlive(im)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(nodes), float64(bytes) / float64(nodes), nodes
}

// TestImageBytesPerNode holds the image's heap per node, above the nodes'
// own paths and data, at 100 000 nodes (issue 34: at most 400 bytes of
// resident memory per node above the data, the Go heap's growth room
// included).
func TestImageBytesPerNode(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 100 000 nodes")
	}
	heap, data, nodes := imageMemory(t, 100_000)
	t.Logf("%d nodes: %.0f bytes of heap per node, %.0f of them the path and data: %.0f above", nodes, heap, data, heap-data)
	if heap-data > 200 {
		t.Errorf("the image holds %.0f bytes of heap per node above the path and data, want at most 200", heap-data)
	}
}

// BenchmarkImageBytesPerNode reports the image's heap per node at 100 000
// nodes (bytes/node) and the part above the nodes' paths and data
// (overhead-bytes/node).
func BenchmarkImageBytesPerNode(b *testing.B) {
	for i := 0; i < b.N; i++ {
		heap, data, _ := imageMemory(b, 100_000)
		b.ReportMetric(heap, "bytes/node")
		b.ReportMetric(heap-data, "overhead-bytes/node")
	}
}
