package fsm

import (
	"fmt"

	"github.com/metaplane/metaplane/core"
	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
)

// resultCodes is the one table between the codes of a refused command's
// CommandResult and the contract's sentinels: the state machine refuses with
// a code (fail), the proposer turns it into the code's sentinel
// (codeError). Each code but CODE_OK and each sentinel has one row. The
// sentinels missing here (ErrNotLeader, ErrCompacted, ErrClosed) are never
// the outcome of applying a command: they come from the member, not the
// state machine.
//
// A CommandResult is not replicated and not stored: each member computes it
// when it applies the entry, and only the proposing member's process reads
// it (Dragonboat keeps no results for the no-op session every proposal
// uses). The codes' numbers are kept stable all the same.
var resultCodes = []struct {
	code     raftv1.Code
	sentinel error
}{
	{raftv1.Code_CODE_NOT_FOUND, core.ErrNotFound},
	{raftv1.Code_CODE_NODE_EXISTS, core.ErrNodeExists},
	{raftv1.Code_CODE_BAD_VERSION, core.ErrBadVersion},
	{raftv1.Code_CODE_NOT_EMPTY, core.ErrNotEmpty},
	{raftv1.Code_CODE_NO_PARENT, core.ErrNoParent},
	{raftv1.Code_CODE_FENCED, core.ErrFenced},
	{raftv1.Code_CODE_SESSION_EXPIRED, core.ErrSessionExpired},
	{raftv1.Code_CODE_INVALID_PATH, core.ErrInvalidPath},
	{raftv1.Code_CODE_INVALID_ARGUMENT, core.ErrInvalidArgument},
	{raftv1.Code_CODE_TOO_LARGE, core.ErrTooLarge},
	// A leader record older than the current leadership: the campaign it
	// belongs to is over; the caller campaigns again.
	{raftv1.Code_CODE_STALE_LEADER, core.ErrUnavailable},
}

// codeError turns a command's result into the contract's error: nil for
// CODE_OK; otherwise the code's sentinel wrapped with the state machine's
// message, inside a *core.TxnError carrying failed_index when the result
// names a failing op.
func CodeError(r *raftv1.CommandResult) error {
	if r.GetCode() == raftv1.Code_CODE_OK {
		return nil
	}
	var err error
	for _, row := range resultCodes {
		if row.code == r.GetCode() {
			err = fmt.Errorf("%w: %s", row.sentinel, r.GetMessage())
			break
		}
	}
	if err == nil {
		err = fmt.Errorf("raft: state machine result %v: %s", r.GetCode(), r.GetMessage())
	}
	if r.GetFailedIndex() >= 0 {
		return &core.TxnError{Index: int(r.GetFailedIndex()), Err: err}
	}
	return err
}
