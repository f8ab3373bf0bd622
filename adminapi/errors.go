package adminapi

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// Error codes carried in adminv1.ErrorDetail.Code.
const (
	CodeNotLeader          = "NOT_LEADER"
	CodeFenced             = "FENCED"
	CodeInvalidArgument    = "INVALID_ARGUMENT"
	CodeInvalidPath        = "INVALID_PATH"
	CodeAlreadyExists      = "ALREADY_EXISTS"
	CodeNotFound           = "NOT_FOUND"
	CodeBadVersion         = "BAD_VERSION"
	CodeNotEmpty           = "NOT_EMPTY"
	CodeNoParent           = "NO_PARENT"
	CodeTooLarge           = "TOO_LARGE"
	CodeSessionExpired     = "SESSION_EXPIRED"
	CodeOffsetCompacted    = "OFFSET_COMPACTED"
	CodeInvalidCoordinator = "INVALID_COORDINATOR"
	CodeClosed             = "CLOSED"
	CodeUnavailable        = "UNAVAILABLE"
	CodeInternal           = "INTERNAL"
	CodeUnauthenticated    = "UNAUTHENTICATED"
	CodePermissionDenied   = "PERMISSION_DENIED"
	// CodeBackendPermissionDenied: the coordinator's metadata store
	// refused its own call for lack of permission (core.ErrPermissionDenied:
	// a ZooKeeper ACL its credentials do not satisfy).
	CodeBackendPermissionDenied = "BACKEND_PERMISSION_DENIED"
)

// The per-bucket error codes of an AdjustIsr answer
// (adminv1.AdjustIsrResponse_Result.ErrorCode), after the original's
// meanings; UNAVAILABLE (CodeUnavailable) there means the change was not
// written and may be asked for again.
const (
	// IsrFencedLeaderEpoch: the request's leader epoch is not the
	// bucket's (the original's FENCED_LEADER_EPOCH): leadership moved.
	IsrFencedLeaderEpoch = "FENCED_LEADER_EPOCH"
	// IsrInvalidUpdateVersion: the request's bucket epoch is not the
	// bucket's (the original's INVALID_UPDATE_VERSION): the record changed
	// since the leader read it.
	IsrInvalidUpdateVersion = "INVALID_UPDATE_VERSION"
	// IsrNotLeader: the calling server does not lead the bucket.
	IsrNotLeader = "NOT_LEADER_OR_FOLLOWER"
	// IsrIneligibleReplica: the new ISR leaves out the leader, names a
	// replica twice or one that is not assigned, or adds one that is not
	// registered or is shutting down.
	IsrIneligibleReplica = "INELIGIBLE_REPLICA"
	// IsrUnknownBucket: no such bucket.
	IsrUnknownBucket = "UNKNOWN_BUCKET"
)

// The original system's error codes for the two errors operators know by
// number.
const (
	FlussNotCoordinatorLeader = 65 // NotCoordinatorLeaderException
	FlussInvalidCoordinator   = 23 // InvalidCoordinatorException
)

// The admin API's own sentinels, beside core's.
var (
	// ErrInvalidCoordinator is returned by a tablet server refusing a
	// request from a coordinator whose epoch is lower than one it has seen
	// (wrapped in an *InvalidCoordinatorError with the epochs).
	ErrInvalidCoordinator = errors.New("admin: invalid coordinator: epoch lower than the highest seen")
	// ErrUnimplemented is what FromStatus gives for an RPC the server does
	// not serve (the tablet-server RPCs on the ZooKeeper backend).
	ErrUnimplemented = errors.New("admin: not served by this coordinator")
	// ErrUnauthenticated is the answer to a call without the
	// authentication its listener requires (no or a wrong username and
	// password, a client certificate without a name); nothing was done.
	ErrUnauthenticated = errors.New("admin: unauthenticated")
	// ErrPermissionDenied is the answer to a call the authorizer refused
	// (authorizer.enabled): the message names the principal, the
	// operation and the resource; nothing was done.
	ErrPermissionDenied = errors.New("admin: permission denied")
)

// InvalidCoordinatorError is ErrInvalidCoordinator with the epochs.
type InvalidCoordinatorError struct {
	Got, Highest int64
}

func (e *InvalidCoordinatorError) Error() string {
	return fmt.Sprintf("invalid coordinator: request epoch %d is lower than the highest seen, %d", e.Got, e.Highest)
}

// Unwrap makes errors.Is(err, ErrInvalidCoordinator) true.
func (e *InvalidCoordinatorError) Unwrap() error { return ErrInvalidCoordinator }

// FieldError names the request field an error is about; it crosses the wire
// in ErrorDetail.Field. A server wraps its own validation errors in it
// where it knows the field ("server_id"); the message is Err's.
type FieldError struct {
	Field string // the request field, as the .proto names it
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

// errorRow is one row of the table: the sentinel (found with errors.Is), its
// ErrorDetail code and gRPC code, and the detail fields of its typed error.
type errorRow struct {
	sentinel error
	code     string
	status   codes.Code
	fluss    int32
	outcome  adminv1.Outcome
	// put copies the fields of the row's typed error in err's chain, if
	// any, into d.
	put func(err error, d *adminv1.ErrorDetail)
	// typed rebuilds the typed error from d, or returns nil when d carries
	// none (the client then gets the bare sentinel).
	typed func(d *adminv1.ErrorDetail) error
}

// errorTable is the one translation table of the admin API's errors, used
// by ToStatus (the first row whose sentinel errors.Is finds) and FromStatus
// (the first row with the detail's code). Rows that share a code come back
// as the first: the context errors share UNAVAILABLE with ErrUnavailable (a
// server's own deadline says nothing of the client's). An error of no row
// is INTERNAL, the last row, whose sentinel is nil.
var errorTable = []errorRow{
	{sentinel: core.ErrNotLeader, code: CodeNotLeader, status: codes.FailedPrecondition,
		fluss: FlussNotCoordinatorLeader, outcome: adminv1.Outcome_OUTCOME_NOT_APPLIED,
		put: func(err error, d *adminv1.ErrorDetail) {
			if nl, ok := errors.AsType[*core.NotLeaderError](err); ok {
				d.LeaderId, d.LeaderAddress = nl.LeaderID, nl.LeaderAddress
			}
		},
		typed: func(d *adminv1.ErrorDetail) error {
			return &core.NotLeaderError{LeaderID: d.LeaderId, LeaderAddress: d.LeaderAddress}
		}},
	{sentinel: core.ErrFenced, code: CodeFenced, status: codes.FailedPrecondition},
	{sentinel: core.ErrInvalidArgument, code: CodeInvalidArgument, status: codes.InvalidArgument},
	{sentinel: core.ErrInvalidPath, code: CodeInvalidPath, status: codes.InvalidArgument},
	{sentinel: core.ErrNodeExists, code: CodeAlreadyExists, status: codes.AlreadyExists,
		put: func(err error, d *adminv1.ErrorDetail) {
			if e, ok := errors.AsType[*catalog.ExistsError](err); ok {
				d.Kind, d.Name = e.Kind, e.Name
			}
		},
		typed: func(d *adminv1.ErrorDetail) error {
			if d.Kind == "" {
				return nil
			}
			return &catalog.ExistsError{Kind: d.Kind, Name: d.Name}
		}},
	{sentinel: core.ErrNotFound, code: CodeNotFound, status: codes.NotFound,
		put: func(err error, d *adminv1.ErrorDetail) {
			if e, ok := errors.AsType[*catalog.NotFoundError](err); ok {
				d.Kind, d.Name = e.Kind, e.Name
			}
		},
		typed: func(d *adminv1.ErrorDetail) error {
			if d.Kind == "" {
				return nil
			}
			return &catalog.NotFoundError{Kind: d.Kind, Name: d.Name}
		}},
	{sentinel: core.ErrBadVersion, code: CodeBadVersion, status: codes.FailedPrecondition},
	{sentinel: core.ErrNotEmpty, code: CodeNotEmpty, status: codes.FailedPrecondition,
		put: func(err error, d *adminv1.ErrorDetail) {
			if e, ok := errors.AsType[*catalog.NotEmptyError](err); ok {
				d.Kind, d.Name, d.Contents = e.Kind, e.Name, e.Detail
			}
		},
		typed: func(d *adminv1.ErrorDetail) error {
			if d.Kind == "" {
				return nil
			}
			return &catalog.NotEmptyError{Kind: d.Kind, Name: d.Name, Detail: d.Contents}
		}},
	{sentinel: core.ErrNoParent, code: CodeNoParent, status: codes.FailedPrecondition},
	{sentinel: core.ErrTooLarge, code: CodeTooLarge, status: codes.ResourceExhausted},
	{sentinel: core.ErrSessionExpired, code: CodeSessionExpired, status: codes.FailedPrecondition},
	{sentinel: core.ErrCompacted, code: CodeOffsetCompacted, status: codes.OutOfRange},
	{sentinel: ErrInvalidCoordinator, code: CodeInvalidCoordinator, status: codes.FailedPrecondition,
		fluss: FlussInvalidCoordinator,
		put: func(err error, d *adminv1.ErrorDetail) {
			if e, ok := errors.AsType[*InvalidCoordinatorError](err); ok {
				d.CoordinatorEpoch, d.RequestCoordinatorEpoch = e.Highest, e.Got
			}
		},
		typed: func(d *adminv1.ErrorDetail) error {
			return &InvalidCoordinatorError{Got: d.RequestCoordinatorEpoch, Highest: d.CoordinatorEpoch}
		}},
	{sentinel: core.ErrClosed, code: CodeClosed, status: codes.Unavailable, outcome: adminv1.Outcome_OUTCOME_NOT_APPLIED},
	{sentinel: core.ErrUnavailable, code: CodeUnavailable, status: codes.Unavailable, outcome: adminv1.Outcome_OUTCOME_UNKNOWN},
	{sentinel: context.DeadlineExceeded, code: CodeUnavailable, status: codes.DeadlineExceeded, outcome: adminv1.Outcome_OUTCOME_UNKNOWN},
	{sentinel: context.Canceled, code: CodeUnavailable, status: codes.Canceled, outcome: adminv1.Outcome_OUTCOME_UNKNOWN},
	{sentinel: ErrUnauthenticated, code: CodeUnauthenticated, status: codes.Unauthenticated},
	{sentinel: ErrPermissionDenied, code: CodePermissionDenied, status: codes.PermissionDenied},
	{sentinel: core.ErrPermissionDenied, code: CodeBackendPermissionDenied, status: codes.FailedPrecondition, outcome: adminv1.Outcome_OUTCOME_NOT_APPLIED},
	// The fallback: an error of no other row (a malformed stored record, a
	// storage failure). Its outcome is not known.
	{code: CodeInternal, status: codes.Internal, outcome: adminv1.Outcome_OUTCOME_UNKNOWN},
}

// internalRow is the table's last row, the fallback.
var internalRow = errorTable[len(errorTable)-1]

// rowOf returns the row of err: the first whose sentinel is in err's chain.
func rowOf(err error) (errorRow, bool) {
	for _, r := range errorTable {
		if r.sentinel != nil && errors.Is(err, r.sentinel) {
			return r, true
		}
	}
	return errorRow{}, false
}

// rowOfCode returns the first row with the detail code.
func rowOfCode(code string) (errorRow, bool) {
	for _, r := range errorTable {
		if r.code == code {
			return r, true
		}
	}
	return errorRow{}, false
}

// ToStatus converts an error of the catalog, the backend or the coordinator
// into a gRPC status error carrying an adminv1.ErrorDetail, through the
// table: its code, gRPC code, outcome and the fields of the typed error
// (NotLeaderError, the catalog's NotFoundError, ExistsError and
// NotEmptyError, InvalidCoordinatorError, FieldError). The status message is
// err.Error(). A gRPC status error wrapping none of the table's sentinels
// passes through unchanged; an error without a row is INTERNAL. A nil error
// gives nil.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	r, ok := rowOf(err)
	if _, isStatus := status.FromError(err); isStatus && !ok {
		return err
	}
	if !ok {
		r = internalRow
	}
	d := &adminv1.ErrorDetail{Code: r.code, FlussErrorCode: r.fluss, Outcome: r.outcome}
	if r.put != nil {
		r.put(err, d)
	}
	if fe, ok := errors.AsType[*FieldError](err); ok {
		d.Field = fe.Field
	}
	st, serr := status.New(r.status, err.Error()).WithDetails(d)
	if serr != nil {
		return status.Error(r.status, err.Error())
	}
	return st.Err()
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
// catalog's and core's errors through the table, so callers test it with
// errors.Is (core.ErrNotFound, core.ErrNodeExists, core.ErrNotLeader, ...,
// ErrInvalidCoordinator) and errors.As (*core.NotLeaderError,
// *catalog.NotFoundError, *InvalidCoordinatorError, *FieldError, ...) with
// the fields the detail carried. Error() is the server's message. A status
// without a detail, or with a code this client does not know, is mapped by
// its gRPC code: UNAVAILABLE to core.ErrUnavailable, UNIMPLEMENTED to
// ErrUnimplemented, others returned unchanged. A nil error gives nil.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	d := DetailOf(err)
	r, known := errorRow{}, false
	if d != nil {
		r, known = rowOfCode(d.Code)
	}
	if !known {
		switch st.Code() {
		case codes.Unavailable:
			return fmt.Errorf("%w: %s", core.ErrUnavailable, st.Message())
		case codes.Unimplemented:
			return fmt.Errorf("%w: %s", ErrUnimplemented, st.Message())
		}
		return err
	}
	cause := r.sentinel
	if r.typed != nil {
		if t := r.typed(d); t != nil {
			cause = t
		}
	}
	var out error = &serverError{msg: st.Message(), sentinel: cause}
	if d.Field != "" {
		out = &FieldError{Field: d.Field, Err: out}
	}
	return out
}

// serverError keeps the server's message and wraps the sentinel or the
// typed error the detail named.
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
