// Package protocodec encodes the project's protobuf messages with the
// reflection-free methods protoc-gen-go-vtproto generates beside them
// (MarshalVT, UnmarshalVT, SizeVT in the *_vtproto.pb.go files), and any
// other message with the protobuf runtime. The two write the same wire
// format: a record written by one is read by the other.
//
// It serves two kinds of callers: code that encodes messages itself (the
// Raft state machine's commands, records and results; the plugin
// stream's batch sizes) through Marshal, Unmarshal and Size, and gRPC
// connections through Codec, given to a server with grpc.ForceServerCodecV2
// and to a client with grpc.ForceCodecV2 (docs/plugins.md, "Wire
// encoding").
package protocodec

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// message is what protoc-gen-go-vtproto generates for a message with the
// features marshal, unmarshal and size (scripts/proto.sh).
type message interface {
	SizeVT() int
	MarshalToSizedBufferVT([]byte) (int, error)
	UnmarshalVT([]byte) error
}

// Marshal encodes m.
func Marshal(m proto.Message) ([]byte, error) {
	vt, ok := m.(message)
	if !ok {
		return proto.Marshal(m)
	}
	b := make([]byte, vt.SizeVT())
	if _, err := vt.MarshalToSizedBufferVT(b); err != nil {
		return nil, err
	}
	return b, nil
}

// Unmarshal decodes b into m, which it resets first (as proto.Unmarshal
// does). The decoded message holds copies of b's bytes: b may be reused.
func Unmarshal(b []byte, m proto.Message) error {
	vt, ok := m.(message)
	if !ok {
		return proto.Unmarshal(b, m)
	}
	proto.Reset(m)
	return vt.UnmarshalVT(b)
}

// Size is the length of m's encoding.
func Size(m proto.Message) int {
	if vt, ok := m.(message); ok {
		return vt.SizeVT()
	}
	return proto.Size(m)
}

// Codec is a gRPC codec named "proto", gRPC's default: it encodes a
// message with its generated methods and leaves any other message
// (gRPC's own health service, go-plugin's internal services) to gRPC's
// protobuf codec, so that a connection using it speaks the same wire
// format to a peer that does not.
func Codec() encoding.CodecV2 {
	return codec{fallback: encoding.GetCodecV2(grpcproto.Name)}
}

type codec struct {
	fallback encoding.CodecV2
}

func (c codec) Name() string { return grpcproto.Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	vt, ok := v.(message)
	if !ok {
		return c.fallback.Marshal(v)
	}
	size := vt.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		b := make([]byte, size)
		if _, err := vt.MarshalToSizedBufferVT(b); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := vt.MarshalToSizedBufferVT((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	vt, ok := v.(message)
	if !ok {
		return c.fallback.Unmarshal(data, v)
	}
	if m, ok := v.(proto.Message); ok {
		proto.Reset(m)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	// UnmarshalVT copies what it keeps (the generator's safe mode), so
	// the buffer may go back to the pool.
	if err := vt.UnmarshalVT(buf.ReadOnlyData()); err != nil {
		return fmt.Errorf("proto: cannot decode %T: %w", v, err)
	}
	return nil
}
