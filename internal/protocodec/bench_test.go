package protocodec

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
	pb "github.com/metaplane/metaplane/proto/metaplane/v1"
)

// BenchmarkEncoding compares, side by side in one run, the protobuf
// runtime with the generated methods on the messages every write
// encodes and decodes: the host's batch of 16 calls on the plugin's
// TxnStream, the Raft command of one Set, and its change-log record; and
// a FETCH_METADATA answer of 12 records, what a coordinator sends each
// tablet server after a createTable (docs/plugins.md, "Wire encoding").
func BenchmarkEncoding(b *testing.B) {
	value := make([]byte, 128)
	batch := &pb.TxnStreamRequest{}
	for i := range 16 {
		batch.Calls = append(batch.Calls, &pb.TxnCall{Id: uint64(i + 1), DeadlineUnixNano: 1796000000000000000, Request: &pb.TxnRequest{
			ClientId: 3, Ops: []*pb.Op{{Type: pb.OpType_OP_TYPE_SET, Path: fmt.Sprintf("/bench/write-64/c%d", i), Data: value, Version: -1}},
		}})
	}
	command := &raftv1.Command{TimeMs: 1796000000000, Body: &raftv1.Command_Txn{Txn: &raftv1.Txn{
		Ops: []*raftv1.Op{{Type: 2, Path: "/bench/write-64/c7", Data: value, Version: -1}}, Fence: &raftv1.Fence{}, Session: 12,
	}}}
	record := &raftv1.ChangeLogEntry{Events: []*raftv1.Event{{Type: 2, Path: "/bench/write-64/c7", Data: value,
		Stat: &raftv1.Stat{Version: 44, CreateRevision: 1000, ModifyRevision: 20000, CreateTime: 1796000000000, ModifyTime: 1796000000000, DataLength: 128}}}}
	fetch := &adminv1.FetchMetadataResponse{NextOffset: 20001, AppliedOffset: 20000, Leader: true}
	for i := range 12 {
		fetch.Records = append(fetch.Records, &adminv1.MetadataRecord{Type: adminv1.MetadataRecord_CREATED,
			Path: fmt.Sprintf("/metadata/databases/db/tables/t-1234/buckets/%d/leader_isr", i), Data: make([]byte, 600), Offset: 20000, Version: 1})
	}
	for _, c := range []struct {
		name string
		msg  proto.Message
	}{{"txn-stream-16", batch}, {"raft-command", command}, {"change-record", record}, {"fetch-metadata-12", fetch}} {
		raw, err := proto.Marshal(c.msg)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name+"/marshal/runtime", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := proto.Marshal(c.msg); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/marshal/generated", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Marshal(c.msg); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/unmarshal/runtime", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := proto.Unmarshal(raw, c.msg.ProtoReflect().New().Interface()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/unmarshal/generated", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := Unmarshal(raw, c.msg.ProtoReflect().New().Interface()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
