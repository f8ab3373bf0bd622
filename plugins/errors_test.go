package plugins

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/metaplane/metaplane/core"
	pb "github.com/metaplane/metaplane/proto/metaplane/v1"
)

// TestErrorTableCoversEverySentinel: every core sentinel has exactly one row.
func TestErrorTableCoversEverySentinel(t *testing.T) {
	seen := map[pb.Sentinel]bool{}
	for _, row := range errorTable {
		if seen[row.sentinel] {
			t.Errorf("sentinel %v appears twice in the table", row.sentinel)
		}
		seen[row.sentinel] = true
	}
	for _, s := range core.Sentinels {
		n := 0
		for _, row := range errorTable {
			if row.err == s {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%v: %d rows in the translation table, want 1", s, n)
		}
	}
}

// TestErrorTableCoversEveryWireSentinel: every wire sentinel but
// UNSPECIFIED decodes to a row's error, and a wire sentinel this side does
// not know (from a newer plugin) keeps its message and wraps no sentinel.
func TestErrorTableCoversEveryWireSentinel(t *testing.T) {
	for n, name := range pb.Sentinel_name {
		if pb.Sentinel(n) == pb.Sentinel_SENTINEL_UNSPECIFIED {
			continue
		}
		rows := 0
		for _, row := range errorTable {
			if row.sentinel == pb.Sentinel(n) {
				rows++
			}
		}
		if rows != 1 {
			t.Errorf("%s: %d rows in the translation table, want 1", name, rows)
		}
	}
	out := ErrorFromProto(&pb.Error{Sentinel: pb.Sentinel(999), Message: "new in a later version"})
	if out.Error() != "new in a later version" {
		t.Errorf("unknown wire sentinel: message %q", out.Error())
	}
	for _, row := range errorTable {
		if errors.Is(out, row.err) {
			t.Errorf("unknown wire sentinel wraps %v", row.err)
		}
	}
}

// TestErrorRoundTrip sends every sentinel (bare, wrapped, inside a
// TxnError) through a gRPC status and back.
func TestErrorRoundTrip(t *testing.T) {
	sentinels := append(append([]error(nil), core.Sentinels...), context.Canceled, context.DeadlineExceeded)
	for _, s := range sentinels {
		t.Run(s.Error(), func(t *testing.T) {
			cases := map[string]error{
				"bare":    s,
				"wrapped": fmt.Errorf("create /a/b: %w", s),
				"txn":     &core.TxnError{Index: 3, Err: fmt.Errorf("op on /x: %w", s)},
			}
			for name, in := range cases {
				st := ToStatus(in)
				if code := status.Code(st); code != codeOfErr(s) {
					t.Errorf("%s: code %v, want %v", name, code, codeOfErr(s))
				}
				out := FromStatus(st)
				if !errors.Is(out, s) {
					t.Errorf("%s: errors.Is(%v, %v) is false after the round trip", name, out, s)
				}
				if out.Error() != in.Error() {
					t.Errorf("%s: message %q, want %q", name, out.Error(), in.Error())
				}
				if got, want := core.FailedOpIndex(out), core.FailedOpIndex(in); got != want {
					t.Errorf("%s: failed op index %d, want %d", name, got, want)
				}
				// The inline form (GetMany entries, watch responses) too.
				back := ErrorFromProto(ErrorToProto(in))
				if !errors.Is(back, s) || back.Error() != in.Error() {
					t.Errorf("%s: inline round trip gave %v", name, back)
				}
			}
		})
	}
}

func codeOfErr(s error) codes.Code {
	for _, row := range errorTable {
		if row.err == s {
			return row.code
		}
	}
	return codes.Unknown
}

// TestErrorNotLeaderKeepsLeader: the leader's id and address survive, also
// inside a TxnError.
func TestErrorNotLeaderKeepsLeader(t *testing.T) {
	nl := &core.NotLeaderError{LeaderID: "c2", LeaderAddress: "CLIENT://127.0.0.1:9124"}
	for name, in := range map[string]error{
		"bare":    nl,
		"wrapped": fmt.Errorf("txn: %w", nl),
		"txn":     &core.TxnError{Index: 1, Err: nl},
	} {
		out := FromStatus(ToStatus(in))
		var got *core.NotLeaderError
		if !errors.As(out, &got) {
			t.Fatalf("%s: %v is not a *core.NotLeaderError", name, out)
		}
		if got.LeaderID != "c2" || got.LeaderAddress != "CLIENT://127.0.0.1:9124" {
			t.Errorf("%s: leader %q at %q, want c2 at CLIENT://127.0.0.1:9124", name, got.LeaderID, got.LeaderAddress)
		}
		if !errors.Is(out, core.ErrNotLeader) {
			t.Errorf("%s: errors.Is(ErrNotLeader) false", name)
		}
		if core.LeaderAddressOf(out) != "CLIENT://127.0.0.1:9124" {
			t.Errorf("%s: LeaderAddressOf = %q", name, core.LeaderAddressOf(out))
		}
	}
	// Leader unknown.
	out := FromStatus(ToStatus(&core.NotLeaderError{}))
	if !errors.Is(out, core.ErrNotLeader) || core.LeaderAddressOf(out) != "" {
		t.Errorf("unknown leader: got %v", out)
	}
}

// TestErrorTxnIndex: a TxnError keeps its index and its op's sentinel.
func TestErrorTxnIndex(t *testing.T) {
	in := &core.TxnError{Index: 7, Err: fmt.Errorf("check /a: %w", core.ErrBadVersion)}
	out := FromStatus(ToStatus(in))
	var te *core.TxnError
	if !errors.As(out, &te) || te.Index != 7 {
		t.Fatalf("got %v (%T), want a TxnError with index 7", out, out)
	}
	if !errors.Is(te.Err, core.ErrBadVersion) {
		t.Errorf("op error %v does not wrap ErrBadVersion", te.Err)
	}
	if te.Err.Error() != "check /a: metadata: bad version" {
		t.Errorf("op error text %q", te.Err.Error())
	}
}

// TestErrorPlainAndTransport: errors without a sentinel keep their text;
// statuses without a detail map by code.
func TestErrorPlainAndTransport(t *testing.T) {
	out := FromStatus(ToStatus(errors.New("disk on fire")))
	if out.Error() != "disk on fire" {
		t.Errorf("plain error: %q", out.Error())
	}
	for _, s := range core.Sentinels {
		if errors.Is(out, s) {
			t.Errorf("plain error wraps %v", s)
		}
	}
	for _, tt := range []struct {
		code codes.Code
		want error
	}{
		{codes.Unavailable, core.ErrUnavailable},
		{codes.Internal, core.ErrUnavailable},
		{codes.Canceled, context.Canceled},
		{codes.DeadlineExceeded, context.DeadlineExceeded},
		{codes.Unimplemented, core.ErrInvalidArgument},
	} {
		got := FromStatus(status.Error(tt.code, "transport says no"))
		if !errors.Is(got, tt.want) {
			t.Errorf("code %v: got %v, want it to wrap %v", tt.code, got, tt.want)
		}
	}
	if FromStatus(nil) != nil || ToStatus(nil) != nil || ErrorToProto(nil) != nil || ErrorFromProto(nil) != nil {
		t.Error("nil did not translate to nil")
	}
}
