package plugins_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/procstat"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/plugins"
)

// The boundary's cost: the same calls on the memory backend directly and
// through a real metaplane-backend-memory process, with go-plugin's
// automatic mTLS (as shipped) and, for Get and Get100, without it. docs/benchmarks.md
// records the ratios ("Plugin boundary").

// benchBackend returns one way to reach a memory backend: "direct" (in
// this process), "plugin" (a real plugin process over gRPC, with
// go-plugin's automatic mTLS as the coordinator runs it) or
// "plugin-no-mtls" (the same without mTLS, to measure what mTLS costs).
func benchBackend(b *testing.B, name string) core.MetadataBackend {
	b.Helper()
	ctx := context.Background()
	if name == "direct" {
		s := memory.NewStore(memory.StoreOptions{})
		b.Cleanup(func() { s.Close() })
		direct := s.NewClient(core.ClientOptions{})
		b.Cleanup(func() { _ = direct.Close() })
		return direct
	}
	opts := plugins.LaunchOptions{
		Path:   testutil.Binary(b, "metaplane-backend-memory"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if name == "plugin-no-mtls" {
		opts = plugins.WithoutAutoMTLS(opts)
	}
	p, err := plugins.Launch(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	viaPlugin, err := p.NewClient(ctx, core.ClientOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return viaPlugin
}

func benchPaths(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("/bench/n%04d", i)
	}
	return out
}

func fill(b *testing.B, c core.MetadataBackend, paths []string) {
	b.Helper()
	ctx := context.Background()
	value := make([]byte, 256)
	for _, p := range paths {
		if _, _, err := core.Create(ctx, c, p, value, core.CreateOptions{MakeParents: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGet: one read of a 256-byte node.
func BenchmarkGet(b *testing.B) {
	for _, name := range []string{"direct", "plugin", "plugin-no-mtls"} {
		b.Run(name, func(b *testing.B) {
			c := benchBackend(b, name)
			fill(b, c, benchPaths(1))
			ctx := context.Background()
			for b.Loop() {
				if _, err := core.Get(ctx, c, "/bench/n0000"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGet100: 100 nodes read with one GetMany ("batched") or with 100
// Gets ("single"); one op is the 100 reads.
func BenchmarkGet100(b *testing.B) {
	paths := benchPaths(100)
	for _, name := range []string{"direct", "plugin", "plugin-no-mtls"} {
		for _, mode := range []string{"batched", "single"} {
			b.Run(name+"/"+mode, func(b *testing.B) {
				c := benchBackend(b, name)
				fill(b, c, paths)
				ctx := context.Background()
				for b.Loop() {
					if mode == "batched" {
						res, err := c.GetMany(ctx, paths, core.ReadOptions{})
						if err != nil || len(res) != len(paths) {
							b.Fatal(err)
						}
						continue
					}
					for _, p := range paths {
						if _, err := core.Get(ctx, c, p); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// BenchmarkWatchThroughput: how fast a watch delivers changes. Transactions
// of 100 sets each are written; one op is one delivered event.
func BenchmarkWatchThroughput(b *testing.B) {
	const perTxn = 100
	paths := benchPaths(perTxn)
	for _, name := range []string{"direct", "plugin"} {
		b.Run(name, func(b *testing.B) {
			c := benchBackend(b, name)
			fill(b, c, paths)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			ch, err := c.Watch(ctx, "/bench", 0)
			if err != nil {
				b.Fatal(err)
			}
			value := make([]byte, 256)
			ops := make([]core.Op, perTxn)
			for i, p := range paths {
				ops[i] = core.SetOp(p, value, core.AnyVersion)
			}
			b.ResetTimer()
			txns := (b.N + perTxn - 1) / perTxn
			go func() {
				for i := 0; i < txns && ctx.Err() == nil; i++ {
					if _, err := c.Txn(ctx, ops, core.TxnOptions{}); err != nil {
						return
					}
				}
			}()
			for got := 0; got < txns*perTxn; {
				r, ok := <-ch
				if !ok || r.Err != nil {
					b.Fatalf("watch ended: %v", r.Err)
				}
				got += len(r.Events)
			}
			b.StopTimer()
			b.ReportMetric(float64(txns*perTxn)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkTxnConcurrent: writers (1 or 64) each setting its own 128-byte
// node through a real memory plugin process, on the connection's TxnStream
// and with unary Txn calls, side by side. cpu-µs/op is the CPU of both
// processes (host and plugin) per write; calls/msg how many calls shared a
// message on the stream.
func BenchmarkTxnConcurrent(b *testing.B) {
	for _, writers := range []int{1, 64} {
		for _, mode := range []string{"stream", "unary"} {
			b.Run(fmt.Sprintf("writers=%d/txn=%s", writers, mode), func(b *testing.B) {
				benchTxnConcurrent(b, writers, mode == "stream")
			})
		}
	}
}

func benchTxnConcurrent(b *testing.B, writers int, stream bool) {
	defer plugins.SetTxnStream(stream)()
	c := benchBackend(b, "plugin")
	pid := plugins.ClientPid(c)
	ctx := context.Background()
	paths := benchPaths(writers)
	fill(b, c, paths)
	value := make([]byte, 128)
	var next atomic.Int64
	m0, n0 := plugins.TxnStreamCounts(c)
	cpu0 := procstat.CPU(os.Getpid()) + procstat.CPU(pid)
	b.SetParallelism((writers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	if writers == 1 {
		for i := 0; i < b.N; i++ {
			if _, err := core.Set(ctx, c, paths[0], value, core.AnyVersion, core.Fence{}); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		b.RunParallel(func(pb *testing.PB) {
			path := paths[int(next.Add(1)-1)%writers]
			for pb.Next() {
				if _, err := core.Set(ctx, c, path, value, core.AnyVersion, core.Fence{}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.StopTimer()
	cpu := procstat.CPU(os.Getpid()) + procstat.CPU(pid) - cpu0
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	if m1, n1 := plugins.TxnStreamCounts(c); m1 > m0 {
		b.ReportMetric(float64(n1-n0)/float64(m1-m0), "calls/msg")
	}
}
