package zookeeper

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/metaplane/metaplane/core"
)

// mapErr translates a go-zookeeper error into the core sentinel it means,
// keeping the original text. create says whether the failing request was a
// create (ZooKeeper's NoNode then means the parent is missing). path names
// the node in the message.
func mapErr(err error, path string, create bool) error {
	if err == nil {
		return nil
	}
	var s error
	switch {
	case errors.Is(err, zk.ErrNoNode):
		if create {
			s = core.ErrNoParent
		} else {
			s = core.ErrNotFound
		}
	case errors.Is(err, zk.ErrNodeExists):
		s = core.ErrNodeExists
	case errors.Is(err, zk.ErrBadVersion):
		s = core.ErrBadVersion
	case errors.Is(err, zk.ErrNotEmpty):
		s = core.ErrNotEmpty
	case errors.Is(err, zk.ErrNoChildrenForEphemerals):
		// A child of an ephemeral node: the contract's "no (usable) parent".
		s = core.ErrNoParent
	case errors.Is(err, zk.ErrBadArguments), errors.Is(err, zk.ErrInvalidACL),
		errors.Is(err, zk.ErrInvalidFlags), errors.Is(err, zk.ErrInvalidPath):
		s = core.ErrInvalidArgument
	case errors.Is(err, zk.ErrSessionExpired):
		s = core.ErrSessionExpired
	case errors.Is(err, zk.ErrNoAuth):
		// A node's ACL the client's credentials do not satisfy.
		s = core.ErrPermissionDenied
	case errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrNoServer),
		errors.Is(err, zk.ErrClosing), errors.Is(err, zk.ErrSessionMoved):
		s = core.ErrUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	default:
		s = core.ErrUnavailable
	}
	if path == "" {
		return fmt.Errorf("%w (zookeeper: %v)", s, err)
	}
	return fmt.Errorf("%w: %s (zookeeper: %v)", s, path, err)
}

// retriable reports whether a failed read may be retried: the request did
// not reach a server or its answer was lost with the connection.
func retriable(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved)
}

// transportErr is the error of a write whose outcome is unknown (the
// connection or session was lost while it was in flight).
// A client closing under it is such a loss too: the write may have been
// sent (ErrUnavailable, never ErrClosed, which says nothing was applied).
func transportErr(err error, what string) error {
	if errors.Is(err, zk.ErrClosing) || errors.Is(err, core.ErrClosed) {
		return fmt.Errorf("%w: %s: outcome unknown, the client closed while it was in flight (zookeeper: %v)", core.ErrUnavailable, what, err)
	}
	return fmt.Errorf("%w: %s: outcome unknown, the connection was lost while it was in flight (zookeeper: %v)",
		core.ErrUnavailable, what, err)
}
