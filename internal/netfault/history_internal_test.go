package netfault

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// TestLostWrites: an acknowledged write that nothing overlaps and a
// later read that does not show it is a lost write; the same read after
// an acknowledged drop that overlapped the create (and may have taken
// effect after it) is not.
func TestLostWrites(t *testing.T) {
	op := func(kind string, ok bool, call, ret int64) porcupine.Operation {
		return porcupine.Operation{Input: keyInput{Op: kind, Key: "table/t"}, Output: keyOutput{OK: ok}, Call: call, Return: ret}
	}
	lost := lostWrites([]porcupine.Operation{
		op(OpCreate, true, 10, 20),
		op(OpGet, false, 30, 31),
	})
	if len(lost) != 1 {
		t.Fatalf("an acknowledged create read back absent: got %v, want one lost write", lost)
	}
	lost = lostWrites([]porcupine.Operation{
		op(OpDrop, true, 5, 25),
		op(OpCreate, true, 10, 20),
		op(OpGet, false, 30, 31),
	})
	if len(lost) != 0 {
		t.Fatalf("a drop overlapping the create may apply after it: got %v, want none", lost)
	}
	lost = lostWrites([]porcupine.Operation{
		op(OpDrop, true, 1, 5),
		op(OpCreate, true, 10, 20),
		op(OpGet, false, 30, 31),
	})
	if len(lost) != 1 {
		t.Fatalf("a drop that returned before the create was called: got %v, want one lost write", lost)
	}
}
