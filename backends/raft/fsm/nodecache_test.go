package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/metaplane/metaplane/core"
	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
)

// openTestFSM opens a state machine in a new directory, keeping retention
// indexes of change log.
func openTestFSM(t testing.TB, name string, retention int64) *FSM {
	t.Helper()
	f := New(filepath.Join(t.TempDir(), name), retention, nil)
	if _, err := f.Open(nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// snapshotOf is a snapshot of f as Dragonboat would save it.
func snapshotOf(t *testing.T, f *FSM) []byte {
	t.Helper()
	snap, err := f.PrepareSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := f.SaveSnapshot(snap, &buf, nil); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// storedNodes is every node record the store holds, by path.
func storedNodes(t *testing.T, f *FSM) map[string]*raftv1.NodeRecord {
	t.Helper()
	it, err := f.db.NewIter(&pebble.IterOptions{LowerBound: []byte{tagNode}, UpperBound: []byte{tagNode + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[string]*raftv1.NodeRecord{}
	for it.First(); it.Valid(); it.Next() {
		n := &raftv1.NodeRecord{}
		if err := proto.Unmarshal(it.Value(), n); err != nil {
			t.Fatal(err)
		}
		out[string(it.Key()[1:])] = n
	}
	return out
}

// randomCommand is a command over a small tree: transactions of one to
// three creates, sets, deletes and checks with versions right, wrong or
// any (so that many are refused part-way), sessions granted and expired,
// and ephemeral and sequential creates.
func randomCommand(r *rand.Rand, index uint64, sessions *[]int64) *raftv1.Command {
	paths := []string{"/a", "/a/x", "/a/y", "/b", "/b/x", "/a/x/deep"}
	switch k := r.IntN(20); {
	case k == 0:
		*sessions = append(*sessions, int64(index)) // a grant's session id is its index
		return &raftv1.Command{TimeMs: int64(index), Body: &raftv1.Command_SessionGrant{SessionGrant: &raftv1.SessionGrant{Owner: "t", TtlMs: 1000}}}
	case k == 1 && len(*sessions) > 0:
		i := r.IntN(len(*sessions))
		id := (*sessions)[i]
		*sessions = append((*sessions)[:i], (*sessions)[i+1:]...)
		return &raftv1.Command{TimeMs: int64(index), Body: &raftv1.Command_SessionExpire{SessionExpire: &raftv1.SessionExpire{Id: id}}}
	}
	x := &raftv1.Txn{}
	for n := 1 + r.IntN(3); n > 0; n-- {
		op := &raftv1.Op{Path: paths[r.IntN(len(paths))], Version: core.AnyVersion}
		if r.IntN(3) > 0 {
			op.Version = int64(r.IntN(3))
		}
		switch r.IntN(5) {
		case 0, 1:
			op.Type, op.Data = int32(core.OpSet), []byte(fmt.Sprintf("v%d", index))
		case 2:
			op.Type, op.MakeParents = int32(core.OpCreate), r.IntN(2) == 0
			op.Data = bytes.Repeat([]byte{'d'}, r.IntN(40))
			switch m := r.IntN(4); {
			case m == 1:
				op.Mode = int32(core.PersistentSequential)
			case m == 2 && len(*sessions) > 0:
				op.Mode, op.Lease = int32(core.Ephemeral), (*sessions)[r.IntN(len(*sessions))]
			}
		case 3:
			op.Type = int32(core.OpDelete)
		default:
			op.Type = int32(core.OpCheck)
		}
		x.Ops = append(x.Ops, op)
	}
	return &raftv1.Command{TimeMs: int64(index), Body: &raftv1.Command_Txn{Txn: x}}
}

// updateBoth applies cmds, at the indexes after *index, to x and to y
// (the same state machine without what x has: a cache, a slot), fails
// unless every entry has the same result on both, and returns x's.
func updateBoth(t *testing.T, x, y *FSM, index *uint64, cmds [][]byte, what string) []smEntry {
	t.Helper()
	var a, b []smEntry
	for _, c := range cmds {
		*index++
		a = append(a, smEntry{Index: *index, Cmd: c})
		b = append(b, smEntry{Index: *index, Cmd: c})
	}
	outA, err := x.Update(a)
	if err != nil {
		t.Fatal(err)
	}
	outB, err := y.Update(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range outA {
		if outA[i].Result.Value != outB[i].Result.Value || !bytes.Equal(outA[i].Result.Data, outB[i].Result.Data) {
			t.Fatalf("entry %d: with %s code %d %x, without %d %x", outA[i].Index, what,
				outA[i].Result.Value, outA[i].Result.Data, outB[i].Result.Value, outB[i].Result.Data)
		}
	}
	return outA
}

// checkCacheExact fails unless every record in f's cache is the one its
// store holds.
func checkCacheExact(t *testing.T, f *FSM, stored map[string]*raftv1.NodeRecord) {
	t.Helper()
	for p, n := range f.cache.nodes {
		if !proto.Equal(n, stored[p]) {
			t.Fatalf("cache holds %s as %v, the store as %v", p, n, stored[p])
		}
	}
}

// TestNodeCacheIsExact: a state machine with the node cache (bounded to a
// few records, so that it also evicts) and the lookups under nodes a
// command created answered without the store, and one that reads every
// record from its store, fed the same random batches, give the same result
// for every entry and hold the same nodes after every batch; the cache
// holds only what the store holds.
func TestNodeCacheIsExact(t *testing.T) {
	cached, plain := openTestFSM(t, "cached", 1000), openTestFSM(t, "plain", 1000)
	plain.cache, plain.noFreshParents = nil, true
	cached.cache.maxNodes, cached.cache.maxBytes, cached.cache.maxData = 4, 60, 30
	r := rand.New(rand.NewPCG(1, 2))
	var sessions []int64
	index, refused := uint64(0), 0
	for round := 0; round < 400; round++ {
		var cmds [][]byte
		for n := 1 + r.IntN(8); n > 0; n-- {
			cmds = append(cmds, MustMarshal(randomCommand(r, index+uint64(len(cmds))+1, &sessions)))
		}
		for _, e := range updateBoth(t, cached, plain, &index, cmds, "the cache") {
			if e.Result.Value != 0 {
				refused++
			}
		}
		sa, sb := storedNodes(t, cached), storedNodes(t, plain)
		if len(sa) != len(sb) {
			t.Fatalf("after index %d: %d nodes with the cache, %d without", index, len(sa), len(sb))
		}
		for p, n := range sb {
			if !proto.Equal(n, sa[p]) {
				t.Fatalf("after index %d: %s is %v with the cache, %v without", index, p, sa[p], n)
			}
		}
		checkCacheExact(t, cached, sa)
	}
	if refused == 0 || refused == int(index) {
		t.Fatalf("%d of %d entries refused: the workload does not mix refusals and writes", refused, index)
	}
	if len(cached.cache.nodes) == 0 {
		t.Fatal("the cache ended empty: the test did not exercise it")
	}
}

// TestNodeCacheEmptiedBySnapshotRecovery: after a snapshot replaces the
// store's content, a command sees the snapshot's records, not those the
// cache held before.
func TestNodeCacheEmptiedBySnapshotRecovery(t *testing.T) {
	src, dst := openTestFSM(t, "src", 1000), openTestFSM(t, "dst", 1000)
	applyTxn(t, src, 1, "/x", "from the snapshot")
	snap := snapshotOf(t, src)
	applyTxn(t, dst, 1, "/x", "mine")
	setX := func(index uint64, version int64) uint64 {
		out, err := dst.Update([]smEntry{{Index: index, Cmd: MustMarshal(&raftv1.Command{TimeMs: 1, Body: &raftv1.Command_Txn{Txn: &raftv1.Txn{Ops: []*raftv1.Op{{
			Type: int32(core.OpSet), Path: "/x", Data: []byte("set"), Version: version}}}}})}})
		if err != nil {
			t.Fatal(err)
		}
		return out[0].Result.Value
	}
	for i := uint64(2); i <= 4; i++ { // /x at version 3 in dst, and in its cache
		if code := setX(i, core.AnyVersion); code != 0 {
			t.Fatalf("set /x at index %d: code %d", i, code)
		}
	}
	if _, ok := dst.cache.get("/x"); !ok {
		t.Fatal("/x is not in the cache after three sets: the test would not show the recovery empties it")
	}
	if err := dst.RecoverFromSnapshot(bytes.NewReader(snap), nil); err != nil {
		t.Fatal(err)
	}
	// The snapshot's /x is at version 0: a set expecting it succeeds, one
	// expecting dst's old version 3 is refused.
	if code := setX(2, 3); code != uint64(raftv1.Code_CODE_BAD_VERSION) {
		t.Fatalf("set /x expecting the replaced version 3: code %d, want BAD_VERSION", code)
	}
	if code := setX(3, 0); code != 0 {
		t.Fatalf("set /x expecting the snapshot's version 0: code %d", code)
	}
	checkCacheExact(t, dst, storedNodes(t, dst))
}

// TestLogFloorForgottenBySnapshotRecovery: the change log's floor that
// Update keeps between batches is read again after a snapshot replaces the
// store, so every member trims the same history after it (here the
// recovering member's own floor was above the snapshot's).
func TestLogFloorForgottenBySnapshotRecovery(t *testing.T) {
	src, dst := openTestFSM(t, "src", 3), openTestFSM(t, "dst", 3)
	for i := uint64(1); i <= 10; i++ {
		applyTxn(t, src, i, fmt.Sprintf("/s%d", i), "")
	}
	for i := uint64(1); i <= 52; i++ {
		applyTxn(t, dst, i, fmt.Sprintf("/d%d", i), "")
	}
	snap := snapshotOf(t, src)
	if err := dst.RecoverFromSnapshot(bytes.NewReader(snap), nil); err != nil {
		t.Fatal(err)
	}
	applyTxn(t, dst, 11, "/s11", "")
	applyTxn(t, src, 11, "/s11", "")
	for name, f := range map[string]*FSM{"the recovered member": dst, "the snapshot's source": src} {
		floor, err := readUint(f.db, keyLogFloor)
		if err != nil {
			t.Fatal(err)
		}
		if floor != 9 {
			t.Fatalf("%s: change log floor %d after index 11 with retention 3, want 9", name, floor)
		}
		if _, c, err := f.db.Get(logKey(8)); err == nil {
			c.Close()
			t.Fatalf("%s: the change-log record of index 8 is still there below the floor", name)
		}
	}
}
