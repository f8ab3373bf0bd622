package raft

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// BenchmarkWrite measures durable single-node writes with 1, 16 and 64
// concurrent writers on one voter and on three. Concurrent proposals share
// Raft log appends and state-machine batches (one fsync each per batch:
// group commit), so ns/op falls as writers are added; durability is the
// same in every case (every acknowledged write is fsynced in the Raft log
// and in the state machine before it is acknowledged).
//
// BenchmarkWrite/retention=1000 runs three voters and 64 writers with a
// change log of 1000 indexes, so that its floor moves during the run as it
// does on every long-lived store (the default keeps 100 000, more than a
// benchmark writes).
func BenchmarkWrite(b *testing.B) {
	b.Run("retention=1000/voters=3/writers=64", func(b *testing.B) {
		benchmarkWrite(b, 3, 64, 1000)
	})
	for _, voters := range []int{1, 3} {
		for _, writers := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("voters=%d/writers=%d", voters, writers), func(b *testing.B) {
				benchmarkWrite(b, voters, writers, 0)
			})
		}
	}
}

// benchmarkWrite runs writers concurrent creators on voters members
// keeping retention indexes of change log (0: the default).
func benchmarkWrite(b *testing.B, voters, writers int, retention int64) {
	c := startCluster(b, voters, func(i int, o *Options) {
		o.SnapshotThreshold = 100000
		if retention > 0 {
			o.ChangeLogRetention = retention
		}
	})
	cl := c.client(c.waitLeader())
	ctx := context.Background()
	if _, _, err := core.Create(ctx, cl, "/bench", nil, core.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if _, _, err := core.Create(ctx, cl, fmt.Sprintf("/bench/n%d", i), []byte("value"), core.CreateOptions{}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkAllocateIDs measures one id at a time from blocks of 1000 (one
// replicated reservation per block) against one reservation per id.
func BenchmarkAllocateIDs(b *testing.B) {
	for _, block := range []int64{1, 1000} {
		b.Run(fmt.Sprintf("block=%d", block), func(b *testing.B) {
			c := startCluster(b, 1, nil)
			cl := c.client(0)
			a := core.NewBlockAllocator(cl, "/metadata/table_seqid", block)
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := a.Next(ctx, 1, core.Fence{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRead measures a linearizable and a stale single-node read.
func BenchmarkRead(b *testing.B) {
	c := startCluster(b, 1, nil)
	cl := c.client(0)
	ctx := context.Background()
	if _, _, err := core.Create(ctx, cl, "/r", []byte("value"), core.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	for _, stale := range []bool{false, true} {
		b.Run(fmt.Sprintf("stale=%v", stale), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := cl.GetMany(ctx, []string{"/r"}, core.ReadOptions{Stale: stale}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLeaderElection measures the time from stopping the leader of
// three voters (default timing: election.timeout 1s, heartbeat 500ms) to a
// new leader, reported as election-ms (the design target is under 1s).
func BenchmarkLeaderElection(b *testing.B) {
	c := startCluster(b, 3, func(i int, o *Options) {
		o.Heartbeat, o.ElectionTimeout = 500*time.Millisecond, time.Second
	})
	var total time.Duration
	for i := 0; i < b.N; i++ {
		old := c.waitLeader()
		c.stop(old)
		start := time.Now()
		testutil.WaitFor(b, 20*time.Second, "a new leader", func() bool { return c.leader() >= 0 })
		total += time.Since(start)
		if err := c.start(old); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "election-ms")
}
