package raft

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/raft/logstore"
	"github.com/metaplane/metaplane/core"
)

// applySpans records, per member, when each state-machine Update that
// applied an index began and ended.
type applySpans struct {
	mu    sync.Mutex
	spans map[uint64][2]time.Time // last index of the Update -> start, end
}

func (a *applySpans) observe(first, last uint64, start, end time.Time) {
	a.mu.Lock()
	for i := first; i <= last; i++ {
		a.spans[i] = [2]time.Time{start, end}
	}
	a.mu.Unlock()
}

func (a *applySpans) take(index uint64) ([2]time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.spans[index]
	clear(a.spans) // serial writes: nothing older is asked for
	return s, ok
}

// BenchmarkSerialWriteBreakdown times one single-key Set at a time, on the
// leader, in the members' own process (no plugin hop), and splits each
// write into stages: commit (from the call until the leader's state
// machine starts applying the entry: the proposal through Dragonboat's
// engine, the leader's log append and fsync, the replication to the
// followers and their fsync, the acknowledgements), apply (the leader's
// state-machine Update) and return (from the end of the apply until the
// call returns: the proposal's completion notice). It runs with each LogDB
// (the members' Pebble LogDB in lazyCommit, the same LogDB unwrapped,
// which fsyncs every commit-index change, and tan; see logdb.go) on one and three
// voters, and reports the p50 of each stage and of the whole write, the
// p50 of a 512-byte fsync in the same directory measured just before, and
// the CPU time and context switches of the process per write.
func BenchmarkSerialWriteBreakdown(b *testing.B) {
	for _, kind := range []string{logstore.KindDefault, logstore.KindPlain, logstore.KindTan} {
		for _, voters := range []int{1, 3} {
			b.Run(fmt.Sprintf("logdb=%s/voters=%d", kind, voters), func(b *testing.B) {
				spans := make([]*applySpans, voters)
				for i := range spans {
					spans[i] = &applySpans{spans: map[uint64][2]time.Time{}}
				}
				c := startCluster(b, voters, func(i int, o *Options) {
					o.SnapshotThreshold = 100000
					o.logDB = kind
					o.observeApply = spans[i].observe
				})
				l := c.waitLeader()
				cl := c.client(l)
				ctx := context.Background()
				data := value128()
				if _, _, err := core.Create(ctx, cl, "/serial", data, core.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
				for i := 0; i < 50; i++ {
					if _, err := core.Set(ctx, cl, "/serial", data, core.AnyVersion, core.Fence{}); err != nil {
						b.Fatal(err)
					}
				}
				fsync := fsyncP50(b, c.dirs[l], 200)
				var total, commit, apply, ret []time.Duration
				var r0, r1 syscall.Rusage
				syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					st, err := core.Set(ctx, cl, "/serial", data, core.AnyVersion, core.Fence{})
					t3 := time.Now()
					if err != nil {
						b.Fatal(err)
					}
					total = append(total, t3.Sub(t0))
					if s, ok := spans[l].take(uint64(st.ModifyRevision)); ok && s[0].After(t0) {
						commit = append(commit, s[0].Sub(t0))
						apply = append(apply, s[1].Sub(s[0]))
						ret = append(ret, t3.Sub(s[1]))
					}
				}
				b.StopTimer()
				syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
				cpu := time.Duration(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano())
				us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
				b.ReportMetric(us(p50(total)), "p50-us")
				b.ReportMetric(us(p50(commit)), "commit-p50-us")
				b.ReportMetric(us(p50(apply)), "apply-p50-us")
				b.ReportMetric(us(p50(ret)), "return-p50-us")
				b.ReportMetric(us(fsync), "fsync-p50-us")
				b.ReportMetric(us(cpu)/float64(b.N), "cpu-us/op")
				b.ReportMetric(float64(r1.Nvcsw+r1.Nivcsw-r0.Nvcsw-r0.Nivcsw)/float64(b.N), "csw/op")
			})
		}
	}
}

func value128() []byte {
	v := make([]byte, 128)
	for i := range v {
		v[i] = byte('a' + i%26)
	}
	return v
}

// fsyncP50 is the p50 of n 512-byte overwrites + fsync of a file in dir.
func fsyncP50(b *testing.B, dir string, n int) time.Duration {
	b.Helper()
	f, err := os.Create(filepath.Join(dir, "fsync-probe"))
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 512)
	var ds []time.Duration
	for i := 0; i < n; i++ {
		t := time.Now()
		if _, err := f.WriteAt(buf, 0); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t))
	}
	return p50(ds)
}

func p50(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
