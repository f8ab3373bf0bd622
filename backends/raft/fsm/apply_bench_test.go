package fsm

import (
	"fmt"
	"testing"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
)

// BenchmarkApply measures the state machine alone (fsm.Update on a real
// Pebble store, no Raft, no plugin): single-op Set commands on nodes
// written in turn, applied in batches of 8 entries (what Dragonboat hands
// Update under many writers). keys=64 is the bench's 64-client row (each
// client rewrites its node); keys=20000 writes more nodes than the node
// cache holds, so every read goes to Pebble. Every voter runs this for
// every write, so its CPU counts three times in a three-voter cluster.
// ns/op is per applied entry; past 100 000 entries (the default change-log
// retention) the log's floor moves. Run with -benchtime 250000x to see both.
func BenchmarkApply(b *testing.B) {
	for _, keys := range []int{64, 20000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) { benchmarkApply(b, keys) })
	}
}

func benchmarkApply(b *testing.B, keys int) {
	const batch = 8
	f := openTestFSM(b, "sm", 100000)
	index := uint64(0)
	apply := func(cmds [][]byte) {
		es := make([]smEntry, len(cmds))
		for i, c := range cmds {
			index++
			es[i] = smEntry{Index: index, Cmd: c}
		}
		out, err := f.Update(es)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range out {
			if e.Result.Value != 0 {
				b.Fatalf("entry %d refused: code %d", e.Index, e.Result.Value)
			}
		}
	}
	create := make([][]byte, keys)
	set := make([][]byte, keys)
	data := make([]byte, 128)
	for k := range create {
		p := fmt.Sprintf("/bench/client-%05d/node", k)
		create[k] = MustMarshal(commandTxn(p, ""))
		set[k] = MustMarshal(&raftv1.Command{TimeMs: 1, Body: &raftv1.Command_Txn{Txn: &raftv1.Txn{Ops: []*raftv1.Op{{
			Type: int32(core.OpSet), Path: p, Data: data, Version: core.AnyVersion}}}}})
	}
	for len(create) > 0 {
		n := min(len(create), 256)
		apply(create[:n])
		create = create[n:]
	}
	b.ReportAllocs()
	b.ResetTimer()
	cmds := make([][]byte, 0, batch)
	for i := 0; i < b.N; i++ {
		cmds = append(cmds, set[i%keys])
		if len(cmds) == batch || i == b.N-1 {
			apply(cmds)
			cmds = cmds[:0]
		}
	}
}

// BenchmarkApplyCreateTable measures the state machine alone applying the
// transaction of a catalog createTable (three buckets: check the database,
// create the table, its schemas node and first schema, the assignment, the
// buckets node, and each bucket with its leader record), one entry per
// Update as serial DDL arrives, on a store already holding tables=N
// tables. Every voter applies it, and the leader's apply is on the DDL's
// path. ns/op is per createTable.
func BenchmarkApplyCreateTable(b *testing.B) {
	for _, tables := range []int{100, 5000} {
		b.Run(fmt.Sprintf("tables=%d", tables), func(b *testing.B) { benchmarkApplyCreateTable(b, tables) })
	}
}

func benchmarkApplyCreateTable(b *testing.B, tables int) {
	f := openTestFSM(b, "sm", 100000)
	index := uint64(0)
	apply := func(cmd []byte) {
		index++
		out, err := f.Update([]smEntry{{Index: index, Cmd: cmd}})
		if err != nil {
			b.Fatal(err)
		}
		if out[0].Result.Value != 0 {
			b.Fatalf("entry %d refused: code %d", index, out[0].Result.Value)
		}
	}
	apply(MustMarshal(commandTxn(catalog.DatabasePath("db"), "{}")))
	reg, schema, assign, lai := make([]byte, 320), make([]byte, 160), make([]byte, 96), make([]byte, 112)
	createTable := func(id int) []byte {
		op := func(p string, data []byte, parents bool) *raftv1.Op {
			return &raftv1.Op{Type: int32(core.OpCreate), Path: p, Data: data, Version: core.AnyVersion, MakeParents: parents}
		}
		t := fmt.Sprintf("t%d", id)
		ops := []*raftv1.Op{
			{Type: int32(core.OpCheck), Path: catalog.DatabasePath("db"), Version: core.AnyVersion},
			op(catalog.TablePath("db", t), reg, true),
			op(catalog.SchemasPath("db", t), nil, false),
			op(catalog.SchemaPath("db", t, 1), schema, false),
			op(catalog.TableAssignmentPath(int64(id)), assign, true),
			op(catalog.BucketsPath(int64(id), -1), nil, false),
		}
		for bucket := int32(0); bucket < 3; bucket++ {
			ops = append(ops, op(catalog.BucketPath(int64(id), -1, bucket), nil, false),
				op(catalog.LeaderAndIsrPath(int64(id), -1, bucket), lai, false))
		}
		return MustMarshal(&raftv1.Command{TimeMs: 1, Body: &raftv1.Command_Txn{Txn: &raftv1.Txn{Ops: ops}}})
	}
	for id := 1; id <= tables; id++ {
		apply(createTable(id))
	}
	cmds := make([][]byte, b.N)
	for i := range cmds {
		cmds[i] = createTable(tables + 1 + i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for _, c := range cmds {
		apply(c)
	}
}
