package image_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/metaplane/metaplane/core"
)

// BenchmarkImageReads times the catalog's hot reads on a 100 000-node
// image (flussImage): GetManyShared of three paths, Children of a table's
// partitions and of the 4 300 tables, SnapshotShared of 70 000 nodes, and
// an own write that changes a node.
func BenchmarkImageReads(b *testing.B) {
	im, tables := flussImage(b, 100_000)
	ctx := context.Background()
	b.Run("GetManyShared3", func(b *testing.B) {
		b.ReportAllocs()
		paths := make([][]string, 1024)
		for i := range paths {
			t := 1 + (i*7919)%tables
			paths[i] = []string{
				fmt.Sprintf("/metadata/databases/bench/tables/t%05d/schemas/1", t),
				fmt.Sprintf("/tabletservers/tables/%d", t),
				fmt.Sprintf("/tabletservers/partitions/%d/buckets/1/leader_isr", 2*t),
			}
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			res, err := im.GetManyShared(ctx, paths[i%len(paths)], core.ReadOptions{})
			if err != nil || res[2].Err != nil || len(res[0].Node.Data) == 0 {
				b.Fatal(err, res)
			}
		}
	})
	b.Run("Children", func(b *testing.B) {
		b.ReportAllocs()
		paths := make([]string, 1024)
		for i := range paths {
			paths[i] = fmt.Sprintf("/metadata/databases/bench/tables/t%05d/partitions", 1+(i*7919)%tables)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			names, _, err := im.Children(ctx, paths[i%len(paths)], core.ReadOptions{})
			if err != nil || len(names) != 2 {
				b.Fatal(err, names)
			}
		}
	})
	b.Run("ChildrenLarge", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			names, _, err := im.Children(ctx, "/metadata/databases/bench/tables", core.ReadOptions{})
			if err != nil || len(names) != tables {
				b.Fatal(err, len(names))
			}
		}
	})
	b.Run("SnapshotShared", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			snap, err := im.SnapshotShared(ctx, "/tabletservers/partitions")
			if err != nil || len(snap.Nodes) < tables {
				b.Fatal(err, len(snap.Nodes))
			}
		}
	})
	b.Run("ApplyWriteSet", func(b *testing.B) {
		b.ReportAllocs()
		data := []byte(`{"leader":1,"isr":[1,2,3],"leader_epoch":7,"coordinator_epoch":1,"bucket_epoch":9}`)
		paths := make([]string, 1024)
		for i := range paths {
			paths[i] = fmt.Sprintf("/tabletservers/partitions/%d/buckets/2/leader_isr", 1+(i*7919)%(2*tables))
		}
		rev := im.Revision()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			rev++
			p := paths[i%len(paths)]
			im.ApplyWrite([]core.Op{core.SetOp(p, data, core.AnyVersion)}, core.TxnResult{Revision: rev,
				Results: []core.OpResult{{Type: core.OpSet, Path: p, Stat: core.Stat{Version: 3, CreateRevision: 5, ModifyRevision: rev, CreateTime: 1700000000000, ModifyTime: 1700000000000 + rev}}}})
		}
	})
}
