package fsm

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/metaplane/metaplane/core"
	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
)

// randomLeadershipCommand is a command that reads or writes the leader
// record: leader records (some of a stale term), resignations (of the
// current epoch or another), session grants and expiries (the leader's
// own session among them), and transactions fenced with the current
// epoch, a stale one or none.
func randomLeadershipCommand(r *rand.Rand, index uint64, term *uint64, epoch int64, sessions *[]int64) *raftv1.Command {
	c := &raftv1.Command{TimeMs: int64(index)}
	switch k := r.IntN(10); {
	case k < 2:
		if r.IntN(4) > 0 {
			*term++
		}
		t := *term
		if r.IntN(5) == 0 && t > 1 {
			t-- // stale: refused
		}
		var s int64
		if len(*sessions) > 0 {
			s = (*sessions)[r.IntN(len(*sessions))]
		}
		c.Body = &raftv1.Command_Leader{Leader: &raftv1.LeaderRecord{Term: t, CandidateId: "c", Address: "a", ReplicaId: 1, Session: s}}
	case k == 2:
		e := epoch
		if r.IntN(3) == 0 {
			e = int64(r.IntN(5))
		}
		c.Body = &raftv1.Command_Resign{Resign: &raftv1.Resign{Epoch: e}}
	case k == 3:
		*sessions = append(*sessions, int64(index))
		c.Body = &raftv1.Command_SessionGrant{SessionGrant: &raftv1.SessionGrant{Owner: "t", TtlMs: 1000}}
	case k == 4 && len(*sessions) > 0:
		i := r.IntN(len(*sessions))
		id := (*sessions)[i]
		*sessions = append((*sessions)[:i], (*sessions)[i+1:]...)
		c.Body = &raftv1.Command_SessionExpire{SessionExpire: &raftv1.SessionExpire{Id: id}}
	default:
		f := &raftv1.Fence{Valid: r.IntN(4) > 0, Epoch: epoch}
		if r.IntN(3) == 0 {
			f.Epoch = int64(r.IntN(5))
		}
		c.Body = &raftv1.Command_Txn{Txn: &raftv1.Txn{Fence: f, Ops: []*raftv1.Op{{
			Type: int32(core.OpSet), Path: "/", Data: []byte{byte(index)}, Version: core.AnyVersion}}}}
	}
	return c
}

func storedLeader(t *testing.T, f *FSM) *raftv1.LeaderState {
	t.Helper()
	v, err := f.Lookup(LeaderQuery{})
	if err != nil {
		t.Fatal(err)
	}
	return v.(*raftv1.LeaderState)
}

// TestLeaderSlotIsExact: a state machine keeping the leader record in
// its slot and one reading it from the store every time, fed the same
// random batches of leadership commands and fenced writes, give the same
// result for every entry and store the same leader record; the slot, when
// known, holds what the store holds. A snapshot's recovery replaces the
// record without Update: the slot is forgotten, and the recovered member
// fences with the snapshot's epoch.
func TestLeaderSlotIsExact(t *testing.T) {
	slot, plain := openTestFSM(t, "slot", 1000), openTestFSM(t, "plain", 1000)
	plain.noLeaderSlot = true
	r := rand.New(rand.NewPCG(3, 4))
	var sessions []int64
	var term uint64
	index, fenced, epochs := uint64(0), 0, map[int64]bool{}
	for round := 0; round < 300; round++ {
		var cmds [][]byte
		epoch := storedLeader(t, plain).GetEpoch()
		for n := 1 + r.IntN(6); n > 0; n-- {
			cmd := randomLeadershipCommand(r, index+uint64(len(cmds))+1, &term, epoch, &sessions)
			if x := cmd.GetTxn(); x != nil && x.GetFence().GetValid() {
				fenced++
			}
			cmds = append(cmds, MustMarshal(cmd))
		}
		updateBoth(t, slot, plain, &index, cmds, "the slot")
		la, lb := storedLeader(t, slot), storedLeader(t, plain)
		if !proto.Equal(la, lb) {
			t.Fatalf("after index %d: leader record %v with the slot, %v without", index, la, lb)
		}
		if slot.Leader != nil && !proto.Equal(slot.Leader, la) {
			t.Fatalf("after index %d: the slot holds %v, the store %v", index, slot.Leader, la)
		}
		epochs[la.GetEpoch()] = true
	}
	if fenced == 0 || len(epochs) < 5 {
		t.Fatalf("%d fenced writes, %d epochs: the workload does not exercise the fence", fenced, len(epochs))
	}

	// Recovery: dst leads at a higher epoch than the snapshot's.
	src, dst := openTestFSM(t, "src", 1000), openTestFSM(t, "dst", 1000)
	lead := func(f *FSM, index, term uint64) int64 {
		out, err := f.Update([]smEntry{{Index: index, Cmd: MustMarshal(&raftv1.Command{TimeMs: 1,
			Body: &raftv1.Command_Leader{Leader: &raftv1.LeaderRecord{Term: term, CandidateId: "c", ReplicaId: 1}}})}})
		if err != nil || out[0].Result.Value != 0 {
			t.Fatalf("leader record: %v %+v", err, out)
		}
		var res raftv1.CommandResult
		if err := Unmarshal(out[0].Result.Data, &res); err != nil {
			t.Fatal(err)
		}
		return res.GetValue()
	}
	srcEpoch := lead(src, 1, 2)
	snap := snapshotOf(t, src)
	dstEpoch := lead(dst, 1, 7)
	if dst.Leader == nil || dst.Leader.GetEpoch() != dstEpoch {
		t.Fatalf("dst's slot %+v after its leader record of epoch %d", dst.Leader, dstEpoch)
	}
	if err := dst.RecoverFromSnapshot(bytes.NewReader(snap), nil); err != nil {
		t.Fatal(err)
	}
	if dst.Leader != nil {
		t.Fatalf("the slot survived the snapshot's recovery: %v", dst.Leader)
	}
	write := func(epoch int64) uint64 {
		out, err := dst.Update([]smEntry{{Index: 2, Cmd: MustMarshal(&raftv1.Command{TimeMs: 1, Body: &raftv1.Command_Txn{Txn: &raftv1.Txn{
			Fence: &raftv1.Fence{Valid: true, Epoch: epoch},
			Ops:   []*raftv1.Op{{Type: int32(core.OpSet), Path: "/", Data: []byte("x"), Version: core.AnyVersion}}}}})}})
		if err != nil {
			t.Fatal(err)
		}
		return out[0].Result.Value
	}
	if code := write(dstEpoch); code != uint64(raftv1.Code_CODE_FENCED) {
		t.Fatalf("a write fenced with the replaced epoch %d: code %d, want FENCED", dstEpoch, code)
	}
	if code := write(srcEpoch); code != 0 {
		t.Fatalf("a write fenced with the snapshot's epoch %d: code %d", srcEpoch, code)
	}
}
