package fsm

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestCorruptSnapshotRefused: a snapshot whose body does not match its
// checksum is refused with a clear error and the store is left untouched.
func TestCorruptSnapshotRefused(t *testing.T) {
	dir := t.TempDir()
	src := New(filepath.Join(dir, "src"), 1000, nil)
	if _, err := src.Open(nil); err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	applyTxn(t, src, 1, "/a", "one")
	applyTxn(t, src, 2, "/b", "two")
	snap, err := src.PrepareSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := src.SaveSnapshot(snap, &buf, nil); err != nil {
		t.Fatalf("save: %v", err)
	}
	good := buf.Bytes()

	dst := New(filepath.Join(dir, "dst"), 1000, nil)
	if _, err := dst.Open(nil); err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	applyTxn(t, dst, 1, "/mine", "kept")

	// Flip one byte of the body (the last byte is a value byte).
	bad := append([]byte(nil), good...)
	bad[len(bad)-1] ^= 0xff
	err = dst.RecoverFromSnapshot(bytes.NewReader(bad), nil)
	if !errors.Is(err, ErrSnapshotCorrupt) || !strings.Contains(err.Error(), "SHA-256") {
		t.Fatalf("recover from a corrupt snapshot: got %v, want ErrSnapshotCorrupt naming the checksum", err)
	}
	// Truncated and garbage snapshots are refused too.
	for name, b := range map[string][]byte{"truncated": good[:len(good)/2], "garbage": []byte("not a snapshot")} {
		if err := dst.RecoverFromSnapshot(bytes.NewReader(b), nil); !errors.Is(err, ErrSnapshotCorrupt) {
			t.Fatalf("recover from a %s snapshot: got %v, want ErrSnapshotCorrupt", name, err)
		}
	}
	if got := lookupData(t, dst, "/mine"); got != "kept" {
		t.Fatalf("after refused snapshots /mine = %q, want kept (the store was touched)", got)
	}
	if got := lookupData(t, dst, "/a"); got != "" {
		t.Fatalf("after refused snapshots /a = %q, want absent", got)
	}
	// The intact snapshot is accepted and replaces the content.
	if err := dst.RecoverFromSnapshot(bytes.NewReader(good), nil); err != nil {
		t.Fatalf("recover from the intact snapshot: %v", err)
	}
	if got := lookupData(t, dst, "/b"); got != "two" {
		t.Fatalf("after recovery /b = %q, want two", got)
	}
	if got := lookupData(t, dst, "/mine"); got != "" {
		t.Fatalf("after recovery /mine = %q, want gone", got)
	}
	v, _ := dst.Lookup(AppliedQuery{})
	if v.(int64) != 2 {
		t.Fatalf("applied index after recovery %d, want 2", v)
	}
}

func applyTxn(t *testing.T, f *FSM, index uint64, path, data string) {
	t.Helper()
	cmd := MustMarshal(commandTxn(path, data))
	out, err := f.Update([]smEntry{{Index: index, Cmd: cmd}})
	if err != nil || out[0].Result.Value != 0 {
		t.Fatalf("apply %d: %v %+v", index, err, out)
	}
}

func lookupData(t *testing.T, f *FSM, path string) string {
	t.Helper()
	v, err := f.Lookup(GetManyQuery{Paths: []string{path}})
	if err != nil {
		t.Fatal(err)
	}
	r := v.(*GetManyAnswer).Results[0]
	if r.Err != nil {
		return ""
	}
	return string(r.Node.Data)
}
