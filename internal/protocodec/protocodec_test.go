package protocodec

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
	pb "github.com/metaplane/metaplane/proto/metaplane/v1"
)

// projectMessages is every message type of the project's three proto
// files, found through their descriptors (a message added later is
// covered without a change here).
func projectMessages(t *testing.T) []protoreflect.MessageType {
	t.Helper()
	var out []protoreflect.MessageType
	for _, fd := range []protoreflect.FileDescriptor{
		pb.File_metaplane_v1_backend_proto,
		raftv1.File_proto_metaplane_raft_v1_raft_proto,
		adminv1.File_metaplane_admin_v1_admin_proto,
	} {
		var walk func(protoreflect.MessageDescriptors)
		walk = func(ms protoreflect.MessageDescriptors) {
			for i := 0; i < ms.Len(); i++ {
				md := ms.Get(i)
				if md.IsMapEntry() {
					continue
				}
				mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
				if err != nil {
					t.Fatalf("message %s is not registered: %v", md.FullName(), err)
				}
				out = append(out, mt)
				walk(md.Messages())
			}
		}
		walk(fd.Messages())
	}
	if len(out) < 100 {
		t.Fatalf("found %d message types, want the project's (over 100)", len(out))
	}
	return out
}

// fill sets every field of m to a random value (one member of each
// oneof, up to three elements of a list or map), nesting messages up to
// depth levels.
func fill(r *rand.Rand, m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if o := fd.ContainingOneof(); o != nil && !o.IsSynthetic() {
			if m.WhichOneof(o) != nil || r.IntN(2) == 0 {
				continue
			}
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for n := r.IntN(4); n > 0; n-- {
				if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
					if depth == 0 {
						break
					}
					e := l.NewElement()
					fill(r, e.Message(), depth-1)
					l.Append(e)
				} else {
					l.Append(scalar(r, fd))
				}
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for n := r.IntN(3); n > 0; n-- {
				k := scalar(r, fd.MapKey()).MapKey()
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					if depth == 0 {
						break
					}
					v := mp.NewValue()
					fill(r, v.Message(), depth-1)
					mp.Set(k, v)
				} else {
					mp.Set(k, scalar(r, fd.MapValue()))
				}
			}
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			if depth > 0 {
				fill(r, m.Mutable(fd).Message(), depth-1)
			}
		default:
			m.Set(fd, scalar(r, fd))
		}
	}
}

func scalar(r *rand.Rand, fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(r.IntN(2) == 1)
	case protoreflect.EnumKind:
		vs := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vs.Get(r.IntN(vs.Len())).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(r.Uint32()))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(r.Uint64()))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(r.Uint32())
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(r.Uint64())
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(r.Float32())
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(r.NormFloat64())
	case protoreflect.StringKind:
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = byte('a' + r.IntN(26))
		}
		return protoreflect.ValueOfString(string(b))
	case protoreflect.BytesKind:
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return protoreflect.ValueOfBytes(b)
	}
	panic("unhandled kind " + fd.Kind().String())
}

// TestGeneratedMatchesRuntime checks, for every project message filled
// at random many times, that the generated methods and the protobuf
// runtime read each other's encodings back to an equal message, agree
// on the size, and (messages without maps, whose order the runtime does
// not fix) write the same bytes.
func TestGeneratedMatchesRuntime(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	types := projectMessages(t)
	for _, mt := range types {
		if _, ok := mt.New().Interface().(message); !ok {
			t.Fatalf("%s has no generated methods: run make proto", mt.Descriptor().FullName())
		}
		for round := 0; round < 30; round++ {
			m := mt.New()
			fill(r, m, 3)
			msg := m.Interface()

			viaRuntime, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			viaGenerated, err := Marshal(msg)
			if err != nil {
				t.Fatalf("%s: Marshal: %v", mt.Descriptor().FullName(), err)
			}
			if got, want := Size(msg), len(viaRuntime); got != want {
				t.Fatalf("%s: Size %d, the runtime's encoding has %d bytes", mt.Descriptor().FullName(), got, want)
			}
			if !hasMap(m.Descriptor()) && !bytes.Equal(viaGenerated, viaRuntime) {
				t.Fatalf("%s: generated encoding %x differs from the runtime's %x", mt.Descriptor().FullName(), viaGenerated, viaRuntime)
			}

			back := mt.New().Interface()
			if err := Unmarshal(viaRuntime, back); err != nil {
				t.Fatalf("%s: Unmarshal of the runtime's encoding: %v", mt.Descriptor().FullName(), err)
			}
			if !proto.Equal(back, msg) {
				t.Fatalf("%s: generated decoding of the runtime's encoding:\n got %v\nwant %v", mt.Descriptor().FullName(), back, msg)
			}
			back2 := mt.New().Interface()
			if err := proto.Unmarshal(viaGenerated, back2); err != nil {
				t.Fatalf("%s: runtime decoding of the generated encoding: %v", mt.Descriptor().FullName(), err)
			}
			if !proto.Equal(back2, msg) {
				t.Fatalf("%s: runtime decoding of the generated encoding:\n got %v\nwant %v", mt.Descriptor().FullName(), back2, msg)
			}
		}
	}
}

func hasMap(md protoreflect.MessageDescriptor) bool {
	seen := map[protoreflect.FullName]bool{}
	var walk func(protoreflect.MessageDescriptor) bool
	walk = func(md protoreflect.MessageDescriptor) bool {
		if seen[md.FullName()] {
			return false
		}
		seen[md.FullName()] = true
		fs := md.Fields()
		for i := 0; i < fs.Len(); i++ {
			f := fs.Get(i)
			if f.IsMap() {
				return true
			}
			if f.Message() != nil && walk(f.Message()) {
				return true
			}
		}
		return false
	}
	return walk(md)
}

// TestUnmarshalResets: decoding into a message that holds values leaves
// only the decoded ones, as proto.Unmarshal does (the generated method
// alone appends to lists).
func TestUnmarshalResets(t *testing.T) {
	b, err := Marshal(&raftv1.ChangeLogEntry{Events: []*raftv1.Event{{Path: "/a"}}})
	if err != nil {
		t.Fatal(err)
	}
	m := &raftv1.ChangeLogEntry{Events: []*raftv1.Event{{Path: "/old"}, {Path: "/older"}}}
	if err := Unmarshal(b, m); err != nil {
		t.Fatal(err)
	}
	if len(m.Events) != 1 || m.Events[0].Path != "/a" {
		t.Fatalf("decoded into a used message: %v, want only /a", m)
	}
	c := Codec()
	data, err := c.Marshal(&raftv1.ChangeLogEntry{Events: []*raftv1.Event{{Path: "/b"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Unmarshal(data, m); err != nil {
		t.Fatal(err)
	}
	if len(m.Events) != 1 || m.Events[0].Path != "/b" {
		t.Fatalf("codec decoded into a used message: %v, want only /b", m)
	}
}

// TestCodec: the gRPC codec writes what the runtime writes, small and
// pooled sizes alike, its decoding keeps nothing of the buffer it was
// given (which gRPC reuses), a message without generated methods goes
// through gRPC's own codec, and a malformed encoding is refused with the
// message's type named.
func TestCodec(t *testing.T) {
	c := Codec()
	if c.Name() != "proto" {
		t.Fatalf("codec name %q, want proto (gRPC's default content subtype)", c.Name())
	}
	for _, size := range []int{10, 64 << 10} {
		msg := &pb.TxnCall{Id: 7, Request: &pb.TxnRequest{}}
		msg.ContextEnded = string(bytes.Repeat([]byte("x"), size))
		want, err := proto.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		data, err := c.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		got := data.Materialize()
		if !bytes.Equal(got, want) {
			t.Fatalf("size %d: codec wrote %d bytes that differ from the runtime's %d", size, len(got), len(want))
		}
		var back pb.TxnCall
		if err := c.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		data.Free()
		// Overwrite what the codec read: the decoded message must not
		// share it.
		buf := mem.BufferSlice{mem.SliceBuffer(got)}
		if err := c.Unmarshal(buf, &pb.TxnCall{}); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			got[i] = 0
		}
		if !proto.Equal(&back, msg) {
			t.Fatalf("size %d: decoded message differs", size)
		}
	}

	// A message without generated methods: gRPC's health check.
	h := &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING}
	data, err := c.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var hb grpc_health_v1.HealthCheckResponse
	if err := c.Unmarshal(data, &hb); err != nil || hb.Status != h.Status {
		t.Fatalf("health response through the codec: %v, %v", hb.Status, err)
	}

	bad := mem.BufferSlice{mem.SliceBuffer([]byte{0x0a, 0x05, 0x01})} // field 1, length 5, 1 byte
	err = c.Unmarshal(bad, &pb.TxnCall{})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("TxnCall")) {
		t.Fatalf("malformed encoding: %v, want an error naming TxnCall", err)
	}
}
