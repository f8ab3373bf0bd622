package protocodec

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
	pb "github.com/metaplane/metaplane/proto/metaplane/v1"
)

// BenchmarkEncoding compares, side by side in one run, the protobuf
// runtime with the generated methods on the messages every write
// encodes and decodes: the host's batch of 16 calls on the plugin's
// TxnStream, the Raft command of one Set, and its change-log record; and
// a watch message of 12 events, what the coordinator's image receives
// across the plugin after a createTable (docs/plugins.md, "Wire
// encoding").
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
	watch := &pb.WatchResponse{Revision: 20000}
	for i := range 12 {
		watch.Events = append(watch.Events, &pb.WatchEvent{Type: pb.EventType_EVENT_TYPE_CREATED,
			Path: fmt.Sprintf("/metadata/databases/db/tables/t-1234/buckets/%d/leader_isr", i), Data: make([]byte, 600),
			Stat: &pb.Stat{Version: 0, CreateRevision: 20000, ModifyRevision: 20000, CreateTime: 1796000000000, ModifyTime: 1796000000000, DataLength: 600}, Revision: 20000})
	}
	for _, c := range []struct {
		name string
		msg  proto.Message
	}{{"txn-stream-16", batch}, {"raft-command", command}, {"change-record", record}, {"watch-12", watch}} {
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
