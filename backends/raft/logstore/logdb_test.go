package logstore

import (
	"testing"

	pb "github.com/lni/dragonboat/v4/raftpb"
)

// TestCommitStatePrepare: updates with nothing to save are dropped; an
// update whose state did not change gets the replica's last saved state
// (so that tan sees a commit-only change as one, and does not fsync it);
// entries, snapshots and new states are passed on as they are.
func TestCommitStatePrepare(t *testing.T) {
	c := &commitState{newPerReplica[pb.State](nil)}
	st := pb.State{Term: 3, Vote: 2, Commit: 10}
	ent := []pb.Entry{{Index: 11, Term: 3}}
	got := c.prepare([]pb.Update{
		{ShardID: 1, ReplicaID: 1},                                  // nothing: dropped
		{ShardID: 1, ReplicaID: 1, EntriesToSave: ent},              // state unknown yet: left empty
		{ShardID: 1, ReplicaID: 1, State: st},                       // a new state: kept, remembered
		{ShardID: 1, ReplicaID: 1, EntriesToSave: ent},              // unchanged state: the last one
		{ShardID: 1, ReplicaID: 2, EntriesToSave: ent},              // another replica: its own (none)
		{ShardID: 1, ReplicaID: 1, Snapshot: pb.Snapshot{Index: 9}}, // a snapshot: kept
	})
	if len(got) != 5 {
		t.Fatalf("%d updates passed on, want 5 (the empty one dropped): %+v", len(got), got)
	}
	if !pb.IsEmptyState(got[0].State) {
		t.Errorf("first update's state %+v, want empty (nothing saved yet)", got[0].State)
	}
	if got[1].State != st || got[2].State != st || got[4].State != st {
		t.Errorf("states %+v %+v %+v, want %+v each", got[1].State, got[2].State, got[4].State, st)
	}
	if len(got[2].EntriesToSave) != 1 || got[4].Snapshot.Index != 9 {
		t.Errorf("entries or snapshot changed: %+v", got)
	}
	if !pb.IsEmptyState(got[3].State) {
		t.Errorf("replica 2's state %+v, want empty", got[3].State)
	}
	c.forget(1, 1)
	if got := c.prepare([]pb.Update{{ShardID: 1, ReplicaID: 1, EntriesToSave: ent}}); !pb.IsEmptyState(got[0].State) {
		t.Errorf("state after forget %+v, want empty", got[0].State)
	}
}
