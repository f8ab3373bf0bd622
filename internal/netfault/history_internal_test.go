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

// TestIsrModel: the bucket key's model takes changes made outside the
// history (a later bucket epoch) and refuses a record read after a later
// one was seen, and an AdjustIsr acknowledged at an epoch already passed.
func TestIsrModel(t *testing.T) {
	get := func(epoch int32, isr string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{Input: keyInput{Op: OpIsrGet, Key: isrKey}, Output: keyOutput{OK: true, Epoch: epoch, Isr: isr}, Call: call, Return: ret}
	}
	adjust := func(at int32, isr string, ok bool, epoch int32, call, ret int64) porcupine.Operation {
		return porcupine.Operation{Input: keyInput{Op: OpIsrAdjust, Key: isrKey, Expect: at, NewIsr: isr},
			Output: keyOutput{OK: ok, Epoch: epoch, Isr: isr}, Call: call, Return: ret}
	}
	check := func(name string, want bool, ops ...porcupine.Operation) {
		t.Helper()
		if got := porcupine.CheckOperations(KeyModel.ToModel(), ops); got != want {
			t.Errorf("%s: linearizable=%v, want %v", name, got, want)
		}
	}
	check("an outside change between two reads", true,
		get(3, "1,2", 0, 1), get(5, "1", 2, 3))
	check("an adjust at the epoch read", true,
		get(3, "1,2", 0, 1), adjust(3, "1", true, 4, 2, 3), get(4, "1", 4, 5))
	check("a read older than one before it", false,
		get(5, "1", 0, 1), get(3, "1,2", 2, 3))
	check("a read older than an acknowledged adjust", false,
		adjust(3, "1", true, 4, 0, 1), get(3, "1,2", 2, 3))
	check("an adjust acknowledged at an epoch already passed", false,
		get(5, "1,2", 0, 1), adjust(4, "1", true, 5, 2, 3))
	check("the same change asked twice at one epoch", true,
		get(3, "1,2", 0, 1), adjust(3, "1", true, 4, 2, 3), adjust(3, "1", true, 4, 4, 5))
	check("the ISR asked for is already the record's, at a later epoch", true,
		get(3, "1,2", 0, 1), get(5, "1", 2, 3), adjust(3, "1", true, 5, 4, 5))
	check("answered with a record of another ISR", false,
		get(3, "1,2", 0, 1), porcupine.Operation{Input: keyInput{Op: OpIsrAdjust, Key: isrKey, Expect: 3, NewIsr: "1"},
			Output: keyOutput{OK: true, Epoch: 5, Isr: "1,2"}, Call: 2, Return: 3})
	check("another ISR at the same epoch", false,
		get(5, "1,2", 0, 1), get(5, "1", 2, 3))
}
