package adminclient

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/core/catalog"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// Error codes carried in adminv1.ErrorDetail.Code.
const (
	CodeNotLeader          = "NOT_LEADER"
	CodeNotFound           = "NOT_FOUND"
	CodeAlreadyExists      = "ALREADY_EXISTS"
	CodeNotEmpty           = "NOT_EMPTY"
	CodeInvalidArgument    = "INVALID_ARGUMENT"
	CodeFenced             = "FENCED"
	CodeInvalidCoordinator = "INVALID_COORDINATOR"
	CodeOffsetCompacted    = "OFFSET_COMPACTED"
	CodeSessionExpired     = "SESSION_EXPIRED"
	CodeUnavailable        = "UNAVAILABLE"
	CodeInternal           = "INTERNAL"
)

// The original system's error codes for the two errors operators know by
// number.
const (
	FlussNotCoordinatorLeader = 65 // NotCoordinatorLeaderException
	FlussInvalidCoordinator   = 23 // InvalidCoordinatorException
)

// ErrInvalidCoordinator is returned by a tablet server refusing a request
// from a coordinator whose epoch is lower than one it has seen.
var ErrInvalidCoordinator = errors.New("invalid coordinator: epoch lower than the highest seen")

// InvalidCoordinatorError is ErrInvalidCoordinator with the epochs.
type InvalidCoordinatorError struct {
	Got, Highest int64
}

func (e *InvalidCoordinatorError) Error() string {
	return fmt.Sprintf("invalid coordinator: request epoch %d is lower than the highest seen, %d", e.Got, e.Highest)
}

// Unwrap makes errors.Is(err, ErrInvalidCoordinator) true.
func (e *InvalidCoordinatorError) Unwrap() error { return ErrInvalidCoordinator }

// ToStatus converts an error of the catalog, the backend or the coordinator
// into a gRPC status error carrying an adminv1.ErrorDetail.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !isOurs(err) {
		return err
	}
	d := &adminv1.ErrorDetail{}
	code := codes.Internal
	var (
		nf  *catalog.NotFoundError
		ex  *catalog.ExistsError
		ne  *catalog.NotEmptyError
		nl  *core.NotLeaderError
		inv *InvalidCoordinatorError
	)
	switch {
	case errors.As(err, &nl) || errors.Is(err, core.ErrNotLeader):
		code, d.Code, d.FlussErrorCode = codes.FailedPrecondition, CodeNotLeader, FlussNotCoordinatorLeader
		if nl != nil {
			d.LeaderId, d.LeaderAddress = nl.LeaderID, nl.LeaderAddress
		}
	case errors.As(err, &inv):
		code, d.Code, d.FlussErrorCode, d.CoordinatorEpoch = codes.FailedPrecondition, CodeInvalidCoordinator, FlussInvalidCoordinator, inv.Highest
	case errors.As(err, &nf):
		code, d.Code, d.Kind, d.Name = codes.NotFound, CodeNotFound, nf.Kind, nf.Name
	case errors.As(err, &ex):
		code, d.Code, d.Kind, d.Name = codes.AlreadyExists, CodeAlreadyExists, ex.Kind, ex.Name
	case errors.As(err, &ne):
		code, d.Code, d.Kind, d.Name = codes.FailedPrecondition, CodeNotEmpty, ne.Kind, ne.Name
	case errors.Is(err, core.ErrInvalidArgument), errors.Is(err, core.ErrInvalidPath):
		code, d.Code = codes.InvalidArgument, CodeInvalidArgument
	case errors.Is(err, core.ErrFenced):
		code, d.Code = codes.FailedPrecondition, CodeFenced
	case errors.Is(err, core.ErrCompacted):
		code, d.Code = codes.OutOfRange, CodeOffsetCompacted
	case errors.Is(err, core.ErrSessionExpired):
		code, d.Code = codes.FailedPrecondition, CodeSessionExpired
	case errors.Is(err, core.ErrNotFound):
		code, d.Code = codes.NotFound, CodeNotFound
	case errors.Is(err, core.ErrNodeExists):
		code, d.Code = codes.AlreadyExists, CodeAlreadyExists
	case errors.Is(err, core.ErrUnavailable), errors.Is(err, core.ErrClosed):
		code, d.Code = codes.Unavailable, CodeUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		code, d.Code = codes.DeadlineExceeded, CodeUnavailable
	case errors.Is(err, context.Canceled):
		code, d.Code = codes.Canceled, CodeUnavailable
	default:
		d.Code = CodeInternal
	}
	st, serr := status.New(code, err.Error()).WithDetails(d)
	if serr != nil {
		return status.Error(code, err.Error())
	}
	return st.Err()
}

// isOurs reports whether err is one of the error types ToStatus maps (a
// gRPC status error passes through unchanged).
func isOurs(err error) bool {
	for _, s := range core.Sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return errors.Is(err, ErrInvalidCoordinator) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// DetailOf returns the ErrorDetail of a status error, or nil.
func DetailOf(err error) *adminv1.ErrorDetail {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if ed, ok := d.(*adminv1.ErrorDetail); ok {
			return ed
		}
	}
	return nil
}

// NotLeaderAddress reports whether err is a NOT_LEADER answer and, if so,
// the leader's host:port ("" when unknown).
func NotLeaderAddress(err error) (string, bool) {
	d := DetailOf(err)
	if d == nil || d.Code != CodeNotLeader {
		return "", false
	}
	return HostPort(d.LeaderAddress), true
}

// FromStatus converts a status error of the admin API back into the
// catalog's and core's error types, so callers test it with errors.Is
// (core.ErrNotFound, core.ErrNodeExists, core.ErrNotLeader, ...) and
// errors.As (*catalog.NotFoundError, *core.NotLeaderError, ...). The
// server's message is kept.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	d := DetailOf(err)
	if d == nil {
		switch st.Code() {
		case codes.Unavailable:
			return fmt.Errorf("%w: %s", core.ErrUnavailable, st.Message())
		case codes.Unimplemented:
			return fmt.Errorf("%w: %s", ErrUnimplemented, st.Message())
		}
		return err
	}
	msg := st.Message()
	switch d.Code {
	case CodeNotLeader:
		return &core.NotLeaderError{LeaderID: d.LeaderId, LeaderAddress: d.LeaderAddress}
	case CodeNotFound:
		if d.Kind != "" {
			return &catalog.NotFoundError{Kind: d.Kind, Name: d.Name}
		}
		return fmt.Errorf("%w: %s", core.ErrNotFound, msg)
	case CodeAlreadyExists:
		if d.Kind != "" {
			return &catalog.ExistsError{Kind: d.Kind, Name: d.Name}
		}
		return fmt.Errorf("%w: %s", core.ErrNodeExists, msg)
	case CodeNotEmpty:
		return &serverError{msg: msg, sentinel: core.ErrNotEmpty}
	case CodeInvalidArgument:
		return &serverError{msg: msg, sentinel: core.ErrInvalidArgument}
	case CodeFenced:
		return &serverError{msg: msg, sentinel: core.ErrFenced}
	case CodeOffsetCompacted:
		return &serverError{msg: msg, sentinel: core.ErrCompacted}
	case CodeSessionExpired:
		return &serverError{msg: msg, sentinel: core.ErrSessionExpired}
	case CodeUnavailable:
		return &serverError{msg: msg, sentinel: core.ErrUnavailable}
	case CodeInvalidCoordinator:
		return &InvalidCoordinatorError{Highest: d.CoordinatorEpoch, Got: -1}
	}
	return err
}

// ErrUnimplemented is what FromStatus gives for an RPC the server does not
// serve (the tablet-server RPCs on the ZooKeeper backend).
var ErrUnimplemented = errors.New("not served by this coordinator")

// serverError keeps the server's message and wraps a sentinel.
type serverError struct {
	msg      string
	sentinel error
}

func (e *serverError) Error() string { return e.msg }
func (e *serverError) Unwrap() error { return e.sentinel }

// HostPort strips a listener name: "CLIENT://h:p" and "h:p" give "h:p"; a
// comma-separated listener list gives its CLIENT listener (or its first).
func HostPort(listeners string) string {
	if listeners == "" {
		return ""
	}
	parts := strings.Split(listeners, ",")
	pick := parts[0]
	for _, p := range parts {
		if strings.HasPrefix(strings.TrimSpace(p), "CLIENT://") {
			pick = p
			break
		}
	}
	pick = strings.TrimSpace(pick)
	if i := strings.Index(pick, "://"); i >= 0 {
		pick = pick[i+3:]
	}
	return pick
}
