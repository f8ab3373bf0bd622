package raft

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
)

// BenchmarkCreateTableBreakdown times the catalog's createTable (one
// fenced transaction: the table, its schema, the bucket assignment and
// each bucket's leader record) on the leader in the members' own process,
// beside a single-key Set in the same cluster, each split into the stages
// of BenchmarkSerialWriteBreakdown (commit, apply, return). The difference
// between the two is what a DDL costs the store beyond a write.
func BenchmarkCreateTableBreakdown(b *testing.B) {
	for _, voters := range []int{1, 3} {
		b.Run(fmt.Sprintf("voters=%d", voters), func(b *testing.B) {
			spans := make([]*applySpans, voters)
			for i := range spans {
				spans[i] = &applySpans{spans: map[uint64][2]time.Time{}}
			}
			c := startCluster(b, voters, func(i int, o *Options) {
				o.SnapshotThreshold = 100000
				o.observeApply = spans[i].observe
			})
			l := c.waitLeader()
			cl := c.client(l)
			ctx := context.Background()
			lead, err := cl.Campaign(ctx, core.Candidate{ID: "bench", Address: "CLIENT://127.0.0.1:1"})
			if err != nil {
				b.Fatal(err)
			}
			for id := int32(1); id <= 3; id++ {
				reg := catalog.TabletServerRegistration{Listeners: "CLIENT://127.0.0.1:1", RegisterTimestamp: 1}
				if _, _, err := core.Create(ctx, cl, catalog.TabletServerPath(id), reg.Marshal(),
					core.CreateOptions{MakeParents: true}); err != nil {
					b.Fatal(err)
				}
			}
			cat := catalog.New(cl, catalog.Options{Fence: lead.Fence(), Epoch: lead.Epoch()})
			if _, err := cat.CreateDatabase(ctx, "db", catalog.DatabaseRegistration{}, false); err != nil {
				b.Fatal(err)
			}
			spec := catalog.TableSpec{
				Schema: catalog.Schema{Columns: []catalog.Column{
					{Name: "id", Type: catalog.DataType{Type: "BIGINT", Nullable: true}},
					{Name: "name", Type: catalog.DataType{Type: "STRING", Nullable: true}},
				}},
				BucketCount: 3, ReplicationFactor: 3,
			}
			data := value128()
			if _, _, err := core.Create(ctx, cl, "/serial", data, core.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			n := 0
			create := func() (int64, error) {
				n++
				info, err := cat.CreateTable(ctx, "db", fmt.Sprintf("t%d", n), spec, false)
				return info.Revision, err
			}
			set := func() (int64, error) {
				st, err := core.Set(ctx, cl, "/serial", data, core.AnyVersion, core.Fence{})
				return st.ModifyRevision, err
			}
			for i := 0; i < 20; i++ {
				if _, err := create(); err != nil {
					b.Fatal(err)
				}
				if _, err := set(); err != nil {
					b.Fatal(err)
				}
			}
			type stages struct{ total, commit, apply, ret []time.Duration }
			var st [2]stages
			var cpu [2]time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for k, op := range []func() (int64, error){create, set} {
					var r0, r1 syscall.Rusage
					syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
					t0 := time.Now()
					rev, err := op()
					t3 := time.Now()
					syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
					if err != nil {
						b.Fatal(err)
					}
					cpu[k] += time.Duration(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano())
					st[k].total = append(st[k].total, t3.Sub(t0))
					if s, ok := spans[l].take(uint64(rev)); ok && s[0].After(t0) {
						st[k].commit = append(st[k].commit, s[0].Sub(t0))
						st[k].apply = append(st[k].apply, s[1].Sub(s[0]))
						st[k].ret = append(st[k].ret, t3.Sub(s[1]))
					}
				}
			}
			b.StopTimer()
			us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
			for k, name := range []string{"ddl", "set"} {
				b.ReportMetric(us(p50(st[k].total)), name+"-p50-us")
				b.ReportMetric(us(p50(st[k].commit)), name+"-commit-p50-us")
				b.ReportMetric(us(p50(st[k].apply)), name+"-apply-p50-us")
				b.ReportMetric(us(p50(st[k].ret)), name+"-return-p50-us")
				b.ReportMetric(us(cpu[k])/float64(b.N), name+"-cpu-us/op")
			}
		})
	}
}
