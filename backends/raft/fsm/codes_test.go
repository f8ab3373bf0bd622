package fsm

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/metaplane/metaplane/core"
	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
)

// notFromApply are the sentinels no command's result carries: the member,
// not the state machine, returns them.
var notFromApply = []error{core.ErrNotLeader, core.ErrCompacted, core.ErrClosed, core.ErrPermissionDenied}

// TestResultCodesTable: every code but CODE_OK has exactly one row, no
// sentinel has two, and every core sentinel either has a row or is listed
// in notFromApply (a new sentinel fails here until it is placed).
func TestResultCodesTable(t *testing.T) {
	for n, name := range raftv1.Code_name {
		code := raftv1.Code(n)
		rows := 0
		for _, r := range resultCodes {
			if r.code == code {
				rows++
			}
		}
		want := 1
		if code == raftv1.Code_CODE_OK {
			want = 0
		}
		if rows != want {
			t.Errorf("%s: %d rows, want %d", name, rows, want)
		}
	}
	for _, s := range core.Sentinels {
		rows := 0
		for _, r := range resultCodes {
			if r.sentinel == s {
				rows++
			}
		}
		listed := false
		for _, x := range notFromApply {
			listed = listed || x == s
		}
		switch {
		case rows > 1:
			t.Errorf("%v: %d rows, want 1", s, rows)
		case rows == 1 && listed:
			t.Errorf("%v has a row and is listed in notFromApply", s)
		case rows == 0 && !listed:
			t.Errorf("%v: no row in resultCodes and not listed in notFromApply", s)
		}
	}
}

// roundTrip encodes res as the state machine does and decodes it as the
// proposer does.
func roundTrip(t *testing.T, res *raftv1.CommandResult) *raftv1.CommandResult {
	t.Helper()
	var out raftv1.CommandResult
	if err := proto.Unmarshal(MustMarshal(res), &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// TestResultCodeRoundTrip: each row's refusal comes back as its sentinel,
// with the failing op's index (0 too, proto3's zero value) or none (-1),
// and the state machine's message after the sentinel's.
func TestResultCodeRoundTrip(t *testing.T) {
	for _, row := range resultCodes {
		t.Run(row.code.String(), func(t *testing.T) {
			for _, index := range []int{-1, 0, 3} {
				res := roundTrip(t, fail(row.code, index, "set /a: why").result(9))
				if res.GetCode() != row.code || res.GetIndex() != 9 {
					t.Fatalf("index %d: decoded code %v at %d, want %v at 9", index, res.GetCode(), res.GetIndex(), row.code)
				}
				err := CodeError(res)
				if !errors.Is(err, row.sentinel) {
					t.Errorf("index %d: %v does not wrap %v", index, err, row.sentinel)
				}
				if got := core.FailedOpIndex(err); got != index {
					t.Errorf("index %d: FailedOpIndex = %d", index, got)
				}
				opErr := err
				var te *core.TxnError
				if errors.As(err, &te) {
					opErr = te.Err
				}
				if want := row.sentinel.Error() + ": set /a: why"; opErr.Error() != want {
					t.Errorf("index %d: op error %q, want %q", index, opErr.Error(), want)
				}
				for _, s := range core.Sentinels {
					if s != row.sentinel && errors.Is(err, s) {
						t.Errorf("index %d: %v also wraps %v", index, err, s)
					}
				}
			}
		})
	}
}

// TestResultCodeEdges: CODE_OK is no error; a code without a row (a bug,
// caught by TestResultCodesTable) wraps no sentinel and keeps the text.
func TestResultCodeEdges(t *testing.T) {
	if err := CodeError(&raftv1.CommandResult{Code: raftv1.Code_CODE_OK, FailedIndex: 2}); err != nil {
		t.Errorf("CODE_OK: %v", err)
	}
	err := CodeError(&raftv1.CommandResult{Code: raftv1.Code(99), FailedIndex: -1, Message: "from the future"})
	if err == nil || !strings.Contains(err.Error(), "from the future") {
		t.Fatalf("unknown code: got %v", err)
	}
	for _, s := range core.Sentinels {
		if errors.Is(err, s) {
			t.Errorf("unknown code: %v wraps %v", err, s)
		}
	}
}

// TestApplyRefusalCarriesOpIndex: a refused transaction applied by the
// state machine reports the failing op in failed_index, not in the text.
func TestApplyRefusalCarriesOpIndex(t *testing.T) {
	f := New(filepath.Join(t.TempDir(), "sm"), 1000, nil)
	if _, err := f.Open(nil); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	create := func(p string) *raftv1.Op {
		return &raftv1.Op{Type: int32(core.OpCreate), Path: p, Version: core.AnyVersion}
	}
	for i, tt := range []struct {
		name     string
		txn      *raftv1.Txn
		sentinel error
		index    int
		msg      string
	}{
		{"second create of /a", &raftv1.Txn{Ops: []*raftv1.Op{create("/a"), create("/a")}},
			core.ErrNodeExists, 1, "create /a: node exists"},
		{"check of a missing node", &raftv1.Txn{Ops: []*raftv1.Op{{Type: int32(core.OpCheck), Path: "/missing", Version: core.AnyVersion}}},
			core.ErrNotFound, 0, "check /missing: node does not exist"},
		{"set at a wrong version", &raftv1.Txn{Ops: []*raftv1.Op{create("/b"), create("/c"), {Type: int32(core.OpSet), Path: "/b", Version: 4}}},
			core.ErrBadVersion, 2, "set /b: version is 0, expected 4"},
		{"create under a missing parent", &raftv1.Txn{Ops: []*raftv1.Op{create("/x/y")}},
			core.ErrNoParent, 0, "create /x/y: parent /x does not exist"},
		{"empty transaction", &raftv1.Txn{}, core.ErrInvalidArgument, -1, "empty transaction"},
	} {
		out, err := f.Update([]smEntry{{Index: uint64(i + 1), Cmd: MustMarshal(&raftv1.Command{TimeMs: 1, Body: &raftv1.Command_Txn{Txn: tt.txn}})}})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var res raftv1.CommandResult
		if err := proto.Unmarshal(out[0].Result.Data, &res); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if out[0].Result.Value != uint64(res.GetCode()) {
			t.Errorf("%s: result value %d, code %v", tt.name, out[0].Result.Value, res.GetCode())
		}
		if int(res.GetFailedIndex()) != tt.index || res.GetMessage() != tt.msg {
			t.Errorf("%s: failed_index %d, message %q; want %d, %q", tt.name, res.GetFailedIndex(), res.GetMessage(), tt.index, tt.msg)
		}
		err = CodeError(&res)
		if !errors.Is(err, tt.sentinel) || core.FailedOpIndex(err) != tt.index {
			t.Errorf("%s: got %v (op %d), want %v at op %d", tt.name, err, core.FailedOpIndex(err), tt.sentinel, tt.index)
		}
	}
}
