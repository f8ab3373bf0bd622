package adminapi

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// TestErrorTableCoversEverySentinel: every core sentinel and the admin
// API's own have exactly one row, and only the context errors share a
// detail code (with ErrUnavailable, listed before them).
func TestErrorTableCoversEverySentinel(t *testing.T) {
	for _, s := range append(append([]error(nil), core.Sentinels...), ErrInvalidCoordinator) {
		n := 0
		for _, r := range errorTable {
			if r.sentinel == s {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%v: %d rows in the admin error table, want 1", s, n)
		}
	}
	first := map[string]error{}
	for _, r := range errorTable {
		if prev, ok := first[r.code]; ok {
			if prev != core.ErrUnavailable || (r.sentinel != context.Canceled && r.sentinel != context.DeadlineExceeded) {
				t.Errorf("code %s: rows for %v and %v; only the context errors may share ErrUnavailable's", r.code, prev, r.sentinel)
			}
			continue
		}
		first[r.code] = r.sentinel
	}
	if internalRow.code != CodeInternal || internalRow.sentinel != nil {
		t.Errorf("the last row is %s (%v), want INTERNAL with no sentinel", internalRow.code, internalRow.sentinel)
	}
}

// comesBack is the error FromStatus gives for a row's code: the sentinel
// of the first row with that code.
func comesBack(t *testing.T, code string) error {
	t.Helper()
	r, ok := rowOfCode(code)
	if !ok {
		t.Fatalf("no row with code %s", code)
	}
	return r.sentinel
}

// checkWire checks the status ToStatus made of in against its row, and
// that FromStatus brings back the sentinel with the server's message and
// ToStatus of that gives the same status again. It returns FromStatus's
// error.
func checkWire(t *testing.T, name string, in error, r errorRow) error {
	t.Helper()
	st := ToStatus(in)
	if got := status.Code(st); got != r.status {
		t.Errorf("%s: gRPC code %v, want %v", name, got, r.status)
	}
	d := DetailOf(st)
	if d == nil {
		t.Fatalf("%s: no ErrorDetail in %v", name, st)
	}
	if d.Code != r.code || d.FlussErrorCode != r.fluss || d.Outcome != r.outcome {
		t.Errorf("%s: detail code %s, fluss %d, outcome %v; want %s, %d, %v", name, d.Code, d.FlussErrorCode, d.Outcome, r.code, r.fluss, r.outcome)
	}
	if msg := status.Convert(st).Message(); msg != in.Error() {
		t.Errorf("%s: status message %q, want %q", name, msg, in.Error())
	}
	out := FromStatus(st)
	if want := comesBack(t, r.code); want != nil && !errors.Is(out, want) {
		t.Errorf("%s: errors.Is(%v, %v) is false after the round trip", name, out, want)
	}
	if out.Error() != in.Error() {
		t.Errorf("%s: message %q, want the server's %q", name, out.Error(), in.Error())
	}
	// A second trip gives the same detail, and the gRPC code of the row
	// the client saw (the context errors' rows come back as UNAVAILABLE's).
	back, _ := rowOfCode(r.code)
	again := ToStatus(out)
	if status.Code(again) != back.status || !proto.Equal(DetailOf(again), d) {
		t.Errorf("%s: a second round trip gave %v %v, want %v %v", name, status.Code(again), DetailOf(again), back.status, d)
	}
	return out
}

// TestErrorRoundTrip: every row's sentinel, bare and wrapped, through a
// status and back.
func TestErrorRoundTrip(t *testing.T) {
	for _, r := range errorTable {
		if r.sentinel == nil {
			continue
		}
		t.Run(r.code+"/"+r.sentinel.Error(), func(t *testing.T) {
			for name, in := range map[string]error{
				"bare":    r.sentinel,
				"wrapped": fmt.Errorf("create table db1.t1: %w", r.sentinel),
			} {
				out := checkWire(t, name, in, r)
				for _, s := range core.Sentinels {
					if errors.Is(out, s) && s != comesBack(t, r.code) && !errors.Is(comesBack(t, r.code), s) {
						t.Errorf("%s: %v also wraps %v", name, out, s)
					}
				}
			}
		})
	}
}

// TestErrorTypedRoundTrip: the typed errors come back as their types with
// their fields, the server's message kept.
func TestErrorTypedRoundTrip(t *testing.T) {
	row := func(code string) errorRow {
		r, ok := rowOfCode(code)
		if !ok {
			t.Fatalf("no row %s", code)
		}
		return r
	}
	for _, tt := range []struct {
		name  string
		in    error
		code  string
		check func(t *testing.T, out error, d *adminv1.ErrorDetail)
	}{
		{"not leader", fmt.Errorf("drop table: %w", &core.NotLeaderError{LeaderID: "c2", LeaderAddress: "CLIENT://127.0.0.1:9124"}), CodeNotLeader,
			func(t *testing.T, out error, d *adminv1.ErrorDetail) {
				nl, ok := errors.AsType[*core.NotLeaderError](out)
				if !ok || nl.LeaderID != "c2" || nl.LeaderAddress != "CLIENT://127.0.0.1:9124" {
					t.Errorf("got %#v, want the leader c2 at CLIENT://127.0.0.1:9124", nl)
				}
				if d.LeaderId != "c2" || d.LeaderAddress != "CLIENT://127.0.0.1:9124" {
					t.Errorf("detail leader %q at %q", d.LeaderId, d.LeaderAddress)
				}
			}},
		{"not leader, leader unknown", &core.NotLeaderError{}, CodeNotLeader,
			func(t *testing.T, out error, d *adminv1.ErrorDetail) {
				if nl, ok := errors.AsType[*core.NotLeaderError](out); !ok || nl.LeaderAddress != "" || nl.LeaderID != "" {
					t.Errorf("got %#v, want a NotLeaderError with no leader", nl)
				}
			}},
		{"invalid coordinator", &InvalidCoordinatorError{Got: 3, Highest: 5}, CodeInvalidCoordinator,
			func(t *testing.T, out error, d *adminv1.ErrorDetail) {
				if e, ok := errors.AsType[*InvalidCoordinatorError](out); !ok || e.Got != 3 || e.Highest != 5 {
					t.Errorf("got %#v, want epochs 3 and 5", e)
				}
				if d.CoordinatorEpoch != 5 || d.RequestCoordinatorEpoch != 3 {
					t.Errorf("detail epochs %d, %d", d.CoordinatorEpoch, d.RequestCoordinatorEpoch)
				}
			}},
		{"not found", fmt.Errorf("get table: %w", &catalog.NotFoundError{Kind: catalog.KindTable, Name: "db1.t1"}), CodeNotFound,
			func(t *testing.T, out error, d *adminv1.ErrorDetail) {
				if e, ok := errors.AsType[*catalog.NotFoundError](out); !ok || e.Kind != catalog.KindTable || e.Name != "db1.t1" {
					t.Errorf("got %#v, want table db1.t1", e)
				}
			}},
		{"exists", &catalog.ExistsError{Kind: catalog.KindDatabase, Name: "db1"}, CodeAlreadyExists,
			func(t *testing.T, out error, d *adminv1.ErrorDetail) {
				if e, ok := errors.AsType[*catalog.ExistsError](out); !ok || e.Kind != catalog.KindDatabase || e.Name != "db1" {
					t.Errorf("got %#v, want database db1", e)
				}
			}},
		{"not empty", &catalog.NotEmptyError{Kind: catalog.KindDatabase, Name: "db1", Detail: "3 tables"}, CodeNotEmpty,
			func(t *testing.T, out error, d *adminv1.ErrorDetail) {
				if e, ok := errors.AsType[*catalog.NotEmptyError](out); !ok || e.Kind != catalog.KindDatabase || e.Name != "db1" || e.Detail != "3 tables" {
					t.Errorf("got %#v, want database db1 holding 3 tables", e)
				}
			}},
		{"field", &FieldError{Field: "server_id", Err: fmt.Errorf("%w: tablet server id -1 is negative", core.ErrInvalidArgument)}, CodeInvalidArgument,
			func(t *testing.T, out error, d *adminv1.ErrorDetail) {
				if e, ok := errors.AsType[*FieldError](out); !ok || e.Field != "server_id" {
					t.Errorf("got %#v, want field server_id", e)
				}
				if d.Field != "server_id" {
					t.Errorf("detail field %q", d.Field)
				}
			}},
		{"field of another code", fmt.Errorf("fetch: %w", &FieldError{Field: "from_offset", Err: core.ErrCompacted}), CodeOffsetCompacted,
			func(t *testing.T, out error, d *adminv1.ErrorDetail) {
				if e, ok := errors.AsType[*FieldError](out); !ok || e.Field != "from_offset" {
					t.Errorf("got %#v, want field from_offset", e)
				}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := checkWire(t, tt.name, tt.in, row(tt.code))
			tt.check(t, out, DetailOf(ToStatus(tt.in)))
		})
	}
}

// TestErrorUntypedDetailFields: a sentinel without its typed error leaves
// the typed fields empty and comes back as the bare sentinel.
func TestErrorUntypedDetailFields(t *testing.T) {
	for _, s := range []error{core.ErrNotFound, core.ErrNodeExists, core.ErrNotEmpty, core.ErrInvalidArgument} {
		st := ToStatus(fmt.Errorf("op: %w", s))
		if d := DetailOf(st); d.Kind != "" || d.Name != "" || d.Field != "" || d.Contents != "" {
			t.Errorf("%v: detail fields filled: %v", s, d)
		}
		out := FromStatus(st)
		if _, ok := errors.AsType[*FieldError](out); ok {
			t.Errorf("%v: a FieldError with no field", s)
		}
		if _, ok := errors.AsType[*catalog.NotFoundError](out); ok {
			t.Errorf("%v: a NotFoundError with no kind", s)
		}
	}
}

// TestErrorInternalAndPassThrough: an error of no row is INTERNAL with an
// unknown outcome and keeps its text; a gRPC status of no row passes
// through; statuses without a detail map by their gRPC code.
func TestErrorInternalAndPassThrough(t *testing.T) {
	out := checkWire(t, "plain", errors.New("disk on fire"), internalRow)
	for _, r := range errorTable {
		if r.sentinel != nil && errors.Is(out, r.sentinel) {
			t.Errorf("plain error wraps %v", r.sentinel)
		}
	}
	foreign := status.Error(codes.PermissionDenied, "not yours")
	if got := ToStatus(foreign); got != foreign {
		t.Errorf("a foreign status was converted: %v", got)
	}
	for _, tt := range []struct {
		st   error
		want error
	}{
		{status.Error(codes.Unavailable, "connection refused"), core.ErrUnavailable},
		{status.Error(codes.Unimplemented, "no such method"), ErrUnimplemented},
		{withDetail(t, codes.Unavailable, &adminv1.ErrorDetail{Code: "FROM_THE_FUTURE"}), core.ErrUnavailable},
	} {
		if got := FromStatus(tt.st); !errors.Is(got, tt.want) {
			t.Errorf("%v: got %v, want it to wrap %v", tt.st, got, tt.want)
		}
	}
	if got := FromStatus(foreign); got != foreign {
		t.Errorf("a status of another code without a detail: got %v, want it unchanged", got)
	}
	if ToStatus(nil) != nil || FromStatus(nil) != nil {
		t.Error("nil did not translate to nil")
	}
}

func withDetail(t *testing.T, c codes.Code, d *adminv1.ErrorDetail) error {
	t.Helper()
	st, err := status.New(c, "msg").WithDetails(d)
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// TestNotLeaderAddress: the redirect target is the leader's host:port.
func TestNotLeaderAddress(t *testing.T) {
	addr, ok := NotLeaderAddress(ToStatus(&core.NotLeaderError{LeaderID: "c2", LeaderAddress: "CLIENT://10.0.0.2:9123"}))
	if !ok || addr != "10.0.0.2:9123" {
		t.Errorf("got %q, %v; want 10.0.0.2:9123, true", addr, ok)
	}
	if _, ok := NotLeaderAddress(ToStatus(core.ErrFenced)); ok {
		t.Error("FENCED read as NOT_LEADER")
	}
}
