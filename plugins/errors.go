package plugins

import (
	"context"
	"errors"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/metaplane/metaplane/core"
	pb "github.com/metaplane/metaplane/proto/metaplane/v1"
)

// This file is the one translation table between core's errors and the
// wire. Each sentinel has a wire name (pb.Sentinel, carried in the Error
// detail, which is authoritative) and a gRPC code (for clients that read
// only the code, and as the fallback when a status has no detail, e.g. a
// transport failure).

type errorRow struct {
	err      error
	sentinel pb.Sentinel
	code     codes.Code
}

var errorTable = []errorRow{
	{core.ErrNotFound, pb.Sentinel_SENTINEL_NOT_FOUND, codes.NotFound},
	{core.ErrNodeExists, pb.Sentinel_SENTINEL_NODE_EXISTS, codes.AlreadyExists},
	{core.ErrBadVersion, pb.Sentinel_SENTINEL_BAD_VERSION, codes.Aborted},
	{core.ErrNotEmpty, pb.Sentinel_SENTINEL_NOT_EMPTY, codes.FailedPrecondition},
	{core.ErrNoParent, pb.Sentinel_SENTINEL_NO_PARENT, codes.FailedPrecondition},
	{core.ErrFenced, pb.Sentinel_SENTINEL_FENCED, codes.PermissionDenied},
	{core.ErrNotLeader, pb.Sentinel_SENTINEL_NOT_LEADER, codes.FailedPrecondition},
	{core.ErrSessionExpired, pb.Sentinel_SENTINEL_SESSION_EXPIRED, codes.FailedPrecondition},
	{core.ErrCompacted, pb.Sentinel_SENTINEL_COMPACTED, codes.OutOfRange},
	{core.ErrTooLarge, pb.Sentinel_SENTINEL_TOO_LARGE, codes.ResourceExhausted},
	{core.ErrInvalidPath, pb.Sentinel_SENTINEL_INVALID_PATH, codes.InvalidArgument},
	{core.ErrInvalidArgument, pb.Sentinel_SENTINEL_INVALID_ARGUMENT, codes.InvalidArgument},
	{core.ErrUnavailable, pb.Sentinel_SENTINEL_UNAVAILABLE, codes.Unavailable},
	{core.ErrClosed, pb.Sentinel_SENTINEL_CLOSED, codes.FailedPrecondition},
	{core.ErrPermissionDenied, pb.Sentinel_SENTINEL_PERMISSION_DENIED, codes.PermissionDenied},
	{context.Canceled, pb.Sentinel_SENTINEL_CANCELED, codes.Canceled},
	{context.DeadlineExceeded, pb.Sentinel_SENTINEL_DEADLINE_EXCEEDED, codes.DeadlineExceeded},
}

// remoteError is an error that crossed the boundary: the backend's message,
// unwrapping to the sentinel it wrapped (nil for a plain error).
type remoteError struct {
	msg      string
	sentinel error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

// ErrorToProto turns an error into its wire detail: the sentinel it wraps
// (the first of the table that errors.Is finds), its message, the leader of
// a core.NotLeaderError and the index of a core.TxnError. A nil error gives
// nil.
func ErrorToProto(err error) *pb.Error {
	if err == nil {
		return nil
	}
	d := &pb.Error{Message: err.Error()}
	var te *core.TxnError
	if errors.As(err, &te) {
		d.TxnIndex = proto.Int32(int32(te.Index))
		if te.Err != nil {
			d.Message = te.Err.Error()
		}
	}
	for _, row := range errorTable {
		if errors.Is(err, row.err) {
			d.Sentinel = row.sentinel
			break
		}
	}
	var nl *core.NotLeaderError
	if errors.As(err, &nl) {
		d.LeaderId = nl.LeaderID
		d.LeaderAddress = nl.LeaderAddress
	}
	return d
}

// ErrorFromProto rebuilds an error from its wire detail: errors.Is finds
// the same sentinel, errors.As finds a *core.NotLeaderError with the leader
// and a *core.TxnError with the index, and Error() is the backend's text. A
// nil detail gives nil.
func ErrorFromProto(d *pb.Error) error {
	if d == nil {
		return nil
	}
	var sentinel error
	for _, row := range errorTable {
		if row.sentinel == d.Sentinel {
			sentinel = row.err
			break
		}
	}
	if sentinel == core.ErrNotLeader {
		sentinel = &core.NotLeaderError{LeaderID: d.LeaderId, LeaderAddress: d.LeaderAddress}
	}
	var err error = &remoteError{msg: d.Message, sentinel: sentinel}
	if d.TxnIndex != nil {
		err = &core.TxnError{Index: int(*d.TxnIndex), Err: err}
	}
	return err
}

// codeOf returns the gRPC code of a wire sentinel.
func codeOf(s pb.Sentinel) codes.Code {
	for _, row := range errorTable {
		if row.sentinel == s {
			return row.code
		}
	}
	return codes.Unknown
}

// ToStatus turns a backend's error into the gRPC status error the server
// answers (the plugin's Backend service does so for each method's error:
// see statusUnary): the table's code, the error's text and an Error detail.
// A nil error gives nil.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	d := ErrorToProto(err)
	any, aerr := anypb.New(d)
	if aerr != nil {
		return status.Error(codeOf(d.Sentinel), err.Error())
	}
	return status.ErrorProto(&spb.Status{
		Code:    int32(codeOf(d.Sentinel)),
		Message: err.Error(),
		Details: []*anypb.Any{any},
	})
}

// FromStatus turns an error returned by a gRPC call into the backend's
// error: from its Error detail when it has one; otherwise from its code
// (Unavailable and the other transport codes become core.ErrUnavailable,
// Canceled and DeadlineExceeded the context errors). A nil error gives nil.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, detail := range st.Details() {
		if d, ok := detail.(*pb.Error); ok {
			return ErrorFromProto(d)
		}
	}
	switch st.Code() {
	case codes.Canceled:
		return &remoteError{msg: "plugin call: " + st.Message(), sentinel: context.Canceled}
	case codes.DeadlineExceeded:
		return &remoteError{msg: "plugin call: " + st.Message(), sentinel: context.DeadlineExceeded}
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.Aborted, codes.ResourceExhausted:
		return &remoteError{msg: core.ErrUnavailable.Error() + ": plugin call: " + st.Message(), sentinel: core.ErrUnavailable}
	case codes.Unimplemented:
		return &remoteError{msg: core.ErrInvalidArgument.Error() + ": the plugin does not implement this call: " + st.Message(), sentinel: core.ErrInvalidArgument}
	}
	return &remoteError{msg: "plugin call: " + st.Code().String() + ": " + st.Message()}
}
