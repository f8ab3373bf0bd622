package core

import (
	"errors"
	"fmt"
)

// The sentinel errors every backend returns. Callers test them with
// errors.Is; backends wrap them with %w to add context. They cross the plugin
// boundary through one translation table (package plugins) and come back as
// the same sentinel.
var (
	// ErrNotFound: the node (or counter, or leader) does not exist.
	ErrNotFound = errors.New("metadata: node not found")
	// ErrNodeExists: create of a node that already exists.
	ErrNodeExists = errors.New("metadata: node exists")
	// ErrBadVersion: the expected version did not match the node's version.
	ErrBadVersion = errors.New("metadata: bad version")
	// ErrNotEmpty: delete of a node that has children.
	ErrNotEmpty = errors.New("metadata: node has children")
	// ErrNoParent: create of a node whose parent does not exist (and
	// MakeParents was not asked for), or a child of an ephemeral node.
	ErrNoParent = errors.New("metadata: parent node does not exist")
	// ErrFenced: the write carried a fence from a leadership that is no
	// longer current. Nothing was changed.
	ErrFenced = errors.New("metadata: fenced by a newer leader epoch")
	// ErrNotLeader: the call needs the leader and this member is not it.
	// Returned wrapped in a *NotLeaderError that carries the leader's
	// address when it is known.
	ErrNotLeader = errors.New("metadata: not the leader")
	// ErrSessionExpired: the session (or lease) the call relies on has
	// expired; its ephemeral nodes are gone.
	ErrSessionExpired = errors.New("metadata: session expired")
	// ErrCompacted: a watch asked for a revision older than the backend
	// keeps. Take a Snapshot and watch on from its revision.
	ErrCompacted = errors.New("metadata: revision compacted")
	// ErrTooLarge: a value larger than the backend's MaxValueSize.
	ErrTooLarge = errors.New("metadata: value too large")
	// ErrInvalidPath: a malformed path (see ValidatePath).
	ErrInvalidPath = errors.New("metadata: invalid path")
	// ErrInvalidArgument: a malformed request other than a path (a negative
	// count, an unknown create mode, an empty transaction, ...).
	ErrInvalidArgument = errors.New("metadata: invalid argument")
	// ErrUnavailable: the backend cannot serve the call now (no quorum, no
	// connection, plugin died). The outcome of a write that fails with
	// ErrUnavailable is unknown unless the backend says otherwise.
	ErrUnavailable = errors.New("metadata: backend unavailable")
	// ErrClosed: the backend (or the leadership, or the session) was closed
	// by its owner.
	ErrClosed = errors.New("metadata: closed")
	// ErrPermissionDenied: the store refused the call for lack of
	// permission (a ZooKeeper node's ACL that the client's credentials do
	// not satisfy). Nothing was changed; retrying does not help until the
	// permissions or the credentials change.
	ErrPermissionDenied = errors.New("metadata: permission denied")
)

// Sentinels lists every sentinel error, for translation tables and tests.
var Sentinels = []error{
	ErrNotFound, ErrNodeExists, ErrBadVersion, ErrNotEmpty, ErrNoParent,
	ErrFenced, ErrNotLeader, ErrSessionExpired, ErrCompacted, ErrTooLarge,
	ErrInvalidPath, ErrInvalidArgument, ErrUnavailable, ErrClosed,
	ErrPermissionDenied,
}

// NotLeaderError is ErrNotLeader with the current leader's identity, when
// known. errors.Is(err, ErrNotLeader) holds for it.
type NotLeaderError struct {
	LeaderID      string // empty when unknown
	LeaderAddress string // empty when unknown
}

func (e *NotLeaderError) Error() string {
	if e.LeaderAddress == "" {
		return ErrNotLeader.Error() + " (leader unknown)"
	}
	return fmt.Sprintf("%s (leader %s at %s)", ErrNotLeader.Error(), e.LeaderID, e.LeaderAddress)
}

// Unwrap makes errors.Is(err, ErrNotLeader) true.
func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }

// LeaderAddressOf returns the leader address carried by a NotLeaderError in
// err's chain, or "" when there is none.
func LeaderAddressOf(err error) string {
	var nl *NotLeaderError
	if errors.As(err, &nl) {
		return nl.LeaderAddress
	}
	return ""
}

// TxnError reports which operation of a transaction failed and why. Nothing
// of the transaction was applied. errors.Is(err, ErrNodeExists) and the like
// see through it to the op's sentinel.
type TxnError struct {
	Index int   // index of the failing op in the ops slice
	Err   error // the op's error, wrapping a sentinel
}

func (e *TxnError) Error() string {
	return fmt.Sprintf("metadata: transaction op %d failed: %v", e.Index, e.Err)
}

// Unwrap returns the failing op's error.
func (e *TxnError) Unwrap() error { return e.Err }

// FailedOpIndex returns the index carried by a *TxnError in err's chain, or
// -1 when err is not about one op.
func FailedOpIndex(err error) int {
	var te *TxnError
	if errors.As(err, &te) {
		return te.Index
	}
	return -1
}
