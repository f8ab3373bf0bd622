package fsm

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
)

// TestCloneNodeCopiesEveryField: every field of NodeRecord, set to a value
// other than its zero, comes through cloneNode.
func TestCloneNodeCopiesEveryField(t *testing.T) {
	n := &raftv1.NodeRecord{}
	m := n.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		switch fd.Kind() {
		case protoreflect.BytesKind:
			m.Set(fd, protoreflect.ValueOfBytes([]byte{byte(i + 1)}))
		case protoreflect.Int64Kind:
			m.Set(fd, protoreflect.ValueOfInt64(int64(i+1)))
		case protoreflect.Int32Kind:
			m.Set(fd, protoreflect.ValueOfInt32(int32(i+1)))
		default:
			t.Fatalf("NodeRecord field %s has kind %v: teach this test and cloneNode about it", fd.Name(), fd.Kind())
		}
	}
	if c := cloneNode(n); !proto.Equal(c, n) {
		t.Fatalf("cloneNode(%v) = %v", n, c)
	}
}
