package migrate

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/core"
)

// heapProbe measures the heap retained above a baseline: every probe
// collects garbage first, so what it sees is what the code under test
// holds, not what it allocated and dropped.
type heapProbe struct {
	base, peak uint64
	calls      int
	every      int // probe every every-th call
}

func (h *heapProbe) reset() {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h.base, h.peak = ms.HeapAlloc, 0
}

// probe measures every every-th call.
func (h *heapProbe) probe() {
	h.calls++
	if h.calls%h.every != 0 {
		return
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if ms.HeapAlloc > h.base {
		h.peak = max(h.peak, ms.HeapAlloc-h.base)
	}
}

// probedSource probes the heap at each page of a streamed snapshot and
// each batched read.
type probedSource struct {
	core.MetadataBackend
	h *heapProbe
}

func (p probedSource) Unwrap() core.MetadataBackend { return p.MetadataBackend }

func (p probedSource) GetMany(ctx context.Context, paths []string, o core.ReadOptions) ([]core.GetResult, error) {
	p.h.probe()
	return p.MetadataBackend.GetMany(ctx, paths, o)
}

// probedWriter probes the heap at each write.
type probedWriter struct {
	w io.Writer
	h *heapProbe
}

func (p probedWriter) Write(b []byte) (int, error) { p.h.probe(); return p.w.Write(b) }

// probedStreamer probes the heap at each page of a streamed snapshot (it
// implements the part itself, so core.StreamSnapshot finds it first).
type probedStreamer struct {
	probedSource
}

func (p probedStreamer) StreamSnapshot(ctx context.Context, prefix string, pageBytes int, fn func(int64, []core.Node) error) error {
	ss, _ := core.Optional[core.SnapshotStreamer](p.MetadataBackend)
	return ss.StreamSnapshot(ctx, prefix, pageBytes, func(rev int64, nodes []core.Node) error {
		p.h.probe()
		return fn(rev, nodes)
	})
}

// TestToolsHoldNoTree: exporting (the streamed path, as raft snapshot save
// and the export verbs on a streaming source) and validating a tree
// retain as much of the heap at 100 000 nodes as at 25 000 (measured after
// a collection at every 32nd page and write of the export, every other
// batched read of the validation; at most 1.5x and 1 MiB
// more), and at 100 000 nodes (about 22 MB of paths and data) less than
// half the tree (validation holds a chunk of 8192 nodes and their reads):
// the tree passes through, it is never held.
func TestToolsHoldNoTree(t *testing.T) {
	small := toolsRetained(t, 25_000)
	large := toolsRetained(t, 100_000)
	for i, what := range []string{"export", "validate"} {
		t.Logf("%s: at most %d KiB retained at 25 000 nodes, %d KiB at 100 000", what, small[i]>>10, large[i]>>10)
		if large[i] > small[i]*3/2+1<<20 || large[i] > 100_000*220/2 {
			t.Fatalf("%s retained %d bytes at 100 000 nodes, %d at 25 000: it grows with the tree", what, large[i], small[i])
		}
	}
}

// toolsRetained builds a tree of nodes nodes of 200 bytes in a memory
// store and returns the most heap that the streamed export of it, and the
// validation of the store against the file, retained at a probe.
func toolsRetained(t *testing.T, nodes int) [2]uint64 {
	t.Helper()
	ctx := context.Background()
	store := memory.NewStore(memory.StoreOptions{})
	src := store.NewClient(core.ClientOptions{Name: "src"})
	defer src.Close()
	data := []byte(strings.Repeat("x", 200))
	var ops []core.Op
	ops = append(ops, core.CreateOp("/metadata", nil, core.Persistent))
	for d := 0; d < nodes/100; d++ {
		dir := fmt.Sprintf("/metadata/d%05d", d)
		ops = append(ops, core.CreateOp(dir, data, core.Persistent))
		for n := 0; n < 99; n++ {
			ops = append(ops, core.CreateOp(fmt.Sprintf("%s/n%03d", dir, n), data, core.Persistent))
		}
		if len(ops) >= 5000 {
			if _, err := src.Txn(ctx, ops, core.TxnOptions{}); err != nil {
				t.Fatal(err)
			}
			ops = ops[:0]
		}
	}
	if len(ops) > 0 {
		if _, err := src.Txn(ctx, ops, core.TxnOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var out [2]uint64
	h := &heapProbe{every: 32}
	f, err := os.Create(filepath.Join(t.TempDir(), "tree.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h.reset()
	res, err := ExportSnapshot(ctx, probedStreamer{probedSource{src, h}}, probedWriter{f, h}, ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Nodes < nodes || h.calls < 64 {
		t.Fatalf("exported %d nodes with %d probes; want %d nodes and many probes", res.Nodes, h.calls, nodes)
	}
	out[0] = h.peak
	h.reset()
	h.calls, h.every = 0, 2
	vr, err := ValidateFile(ctx, probedSource{src, h}, f, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(vr.Differences) != 0 || vr.Nodes != res.Nodes {
		t.Fatalf("validate: %d nodes, differences %+v", vr.Nodes, vr.Differences)
	}
	out[1] = h.peak
	return out
}
