package core

import (
	"context"
	"time"
)

// MetadataBackend is the contract every metadata backend fulfils: a
// hierarchical, versioned key space with ZooKeeper's shape, sessions with
// ephemeral nodes, prefix watches, leader election with fencing, sequence
// counters, status and capabilities.
//
// A MetadataBackend value is one client of a (possibly shared, replicated)
// store: it has exactly one session of its own. Every method is safe for
// concurrent use. Slices passed in are not retained after the call returns
// (the caller may reuse them); slices returned belong to the caller.
//
// Cancelling a call's context abandons the call: it returns an error that
// wraps ctx.Err(). For a write, the outcome is then unknown (it may or may
// not have been applied); for a read, nothing changes. After Close every
// call fails with ErrClosed.
//
// The required interface is deliberately small: convenience calls (Get,
// Exists, Create, Set, Delete, AllocateIDs) are functions in this package
// built on it, and optional parts (LeaseManager, IDAllocator,
// MembershipManager, FaultInjector, SessionExpirer) are separate
// interfaces, so that a new optional part never breaks an existing
// backend. A caller finds an optional part with Optional, never with a
// bare type assertion: Optional honours the declared capabilities and sees
// through wrappers (Unwrapper).
type MetadataBackend interface {
	Reader
	Writer
	Watcher
	Sessions
	Elector

	// Status returns this member's view of the backend. It does not need a
	// quorum. Errors: ErrClosed.
	Status(ctx context.Context) (Status, error)

	// Capabilities returns what the backend supports. It does not block and
	// its result does not change over the backend's life.
	Capabilities() Capabilities

	// Close ends the client's session (deleting its ephemeral nodes on a
	// best-effort basis), resigns any leadership, closes every watch and
	// session-event channel and releases resources. It is idempotent; calls
	// after the first return nil.
	Close() error
}

// Reader is the read half of the key space.
type Reader interface {
	// GetMany reads many paths in one call (the plugin hop costs more than
	// a read: batch). The result has one entry per path, in order; a
	// missing or malformed path is reported in its entry's Err
	// (ErrNotFound, ErrInvalidPath), not as the call's error. The call's
	// error is for the call as a whole: ErrUnavailable, ErrClosed, a
	// context error, or ErrNotLeader on a member that cannot serve
	// linearizable reads. Reads are linearizable unless opts.Stale.
	GetMany(ctx context.Context, paths []string, opts ReadOptions) ([]GetResult, error)

	// Children returns the sorted names (not paths) of path's direct
	// children and path's stat. Errors: ErrNotFound, ErrInvalidPath,
	// ErrUnavailable, ErrClosed, ErrNotLeader.
	Children(ctx context.Context, path string, opts ReadOptions) ([]string, Stat, error)

	// Snapshot reads every node at or below prefix, consistently, at one
	// revision, sorted by path. A prefix that does not exist gives an empty
	// snapshot with the current revision. Errors: ErrInvalidPath,
	// ErrUnavailable, ErrClosed, ErrNotLeader.
	Snapshot(ctx context.Context, prefix string) (Snapshot, error)
}

// Writer is the write half of the key space.
type Writer interface {
	// Txn applies ops atomically: all of them or none. On failure the error
	// is a *TxnError naming the failing op's index and wrapping its
	// sentinel (ErrNotFound, ErrNodeExists, ErrBadVersion, ErrNotEmpty,
	// ErrNoParent, ErrInvalidPath, ErrTooLarge, ErrInvalidArgument), or,
	// for the transaction as a whole, ErrFenced (opts.Fence not current),
	// ErrSessionExpired (an ephemeral create's session or lease is gone),
	// ErrNotLeader, ErrUnavailable, ErrClosed or a context error. On a
	// refused transaction nothing changed; on ErrUnavailable or a context
	// error the outcome is unknown.
	//
	// Ops see the effects of earlier ops of the same transaction (create a
	// parent, then its child). An empty ops slice fails with
	// ErrInvalidArgument.
	Txn(ctx context.Context, ops []Op, opts TxnOptions) (TxnResult, error)
}

// Watcher delivers changes.
type Watcher interface {
	// Watch delivers the changes at or below prefix, in revision order,
	// starting at fromRevision (0: from the next change on). The channel is
	// closed when ctx ends, when the backend closes, or after a response
	// whose Err is set. The backend never blocks on a slow consumer for
	// long: a consumer that falls too far behind gets a final response with
	// ErrCompacted (exact history) or a Reset (without).
	//
	// With exact history, a fromRevision older than the backend keeps fails
	// at once with ErrCompacted. Without exact history a fromRevision > 0
	// is answered with a first Reset response holding the current state
	// (in pages on a large state: WatchResponse.Partial).
	// Errors: ErrInvalidPath, ErrCompacted, ErrClosed, ErrUnavailable.
	Watch(ctx context.Context, prefix string, fromRevision int64) (<-chan WatchResponse, error)
}

// Sessions exposes the client's own session.
type Sessions interface {
	// Session returns the current session; it does not block.
	Session() SessionInfo

	// SessionEvents returns a channel of this client's session events in
	// the order they happen, starting with the next one. The channel is
	// closed when ctx ends or the backend closes. A consumer that does not
	// keep up loses the oldest undelivered events but always receives the
	// latest state. Errors: ErrClosed.
	SessionEvents(ctx context.Context) (<-chan SessionEvent, error)
}

// Elector is the leader election, one per store.
type Elector interface {
	// Campaign blocks until c is elected leader or ctx ends. The returned
	// Leadership's epoch is greater than every earlier leader's. Campaign
	// returns only once the backend is ready for the leader's fenced
	// writes. Errors: context errors (the candidacy is withdrawn),
	// ErrSessionExpired, ErrUnavailable, ErrClosed.
	Campaign(ctx context.Context, c Candidate) (Leadership, error)

	// Leader returns the current leader. Errors: ErrNotFound when there is
	// none, ErrUnavailable, ErrClosed.
	Leader(ctx context.Context) (LeaderInfo, error)

	// ObserveLeader delivers the current leader (if any) and then every
	// change of leader. The channel is closed when ctx ends or the backend
	// closes; a slow consumer sees the latest leader, maybe not every
	// intermediate one. Errors: ErrClosed.
	ObserveLeader(ctx context.Context) (<-chan LeaderInfo, error)
}

// Leadership is an elected leader's handle.
type Leadership interface {
	// Epoch is the leadership's epoch.
	Epoch() int64
	// Fence returns the fence to put on this leader's writes.
	Fence() Fence
	// Lost is closed when the leadership ends: resigned, session lost,
	// superseded, or backend closed. It is never closed while the
	// leadership is current from the backend's point of view.
	Lost() <-chan struct{}
	// Resign gives leadership up and withdraws the candidacy; afterwards
	// the fence is stale. Idempotent. Errors: ErrUnavailable (the
	// leadership is lost anyway), context errors.
	Resign(ctx context.Context) error
}

// LeaseManager is implemented by backends that grant sessions on behalf of
// others (Raft: tablet-server leases held by the coordinator leader). A
// lease's ephemeral nodes (Op.Lease) are deleted when it expires or is
// revoked.
type LeaseManager interface {
	// GrantLease creates a lease with ttl for owner (a free-form label).
	// Errors: ErrFenced, ErrNotLeader, ErrInvalidArgument, ErrUnavailable,
	// ErrClosed.
	GrantLease(ctx context.Context, owner string, ttl time.Duration, fence Fence) (int64, error)
	// RenewLease restarts the lease's clock. Errors: ErrSessionExpired (the
	// lease is gone), ErrNotLeader, ErrUnavailable, ErrClosed.
	RenewLease(ctx context.Context, id int64) error
	// RevokeLease ends the lease now, deleting its ephemerals. Errors:
	// ErrSessionExpired, ErrFenced, ErrNotLeader, ErrUnavailable, ErrClosed.
	RevokeLease(ctx context.Context, id int64, fence Fence) error
}

// IDAllocator is implemented by backends that reserve counter ranges
// natively (one replicated record per range). Backends without it get
// AllocateIDs's compare-and-set loop over the counter node.
type IDAllocator interface {
	// AllocateIDs reserves [first, first+n) from the counter at path,
	// which holds the next value as an 8-byte big-endian integer (created
	// at 0 when missing). Ranges never overlap. Errors: ErrInvalidArgument
	// (n < 1), ErrInvalidPath, ErrFenced, ErrNotLeader, ErrUnavailable,
	// ErrClosed.
	AllocateIDs(ctx context.Context, path string, n int64, fence Fence) (first int64, err error)
}

// MembershipChangeReserve is the part of AddVoter's ctx that a backend
// keeps for the membership changes around its catch-up wait (promoting the
// member, or removing it again): the wait ends this long before ctx's
// deadline (half the time left, when less than twice this is left). A
// caller that allows a catch-up of d passes a deadline d plus this away.
const MembershipChangeReserve = 15 * time.Second

// MembershipManager is implemented by replicated backends whose voter set
// can change at run time.
type MembershipManager interface {
	// AddVoter adds a voter, on the member that leads. A backend with
	// non-voting members adds it as one first, waits (bounded by ctx) until
	// it has caught up (the wait ends MembershipChangeReserve before ctx's
	// deadline), then promotes it; a member that does not catch up
	// is removed again and the call fails with ErrInvalidArgument, the
	// voter set unchanged. A duplicate id or address is ErrInvalidArgument.
	// Errors: ErrNotLeader, ErrInvalidArgument, ErrUnavailable, ErrClosed.
	AddVoter(ctx context.Context, id string, address string) error
	// RemoveVoter removes a member, on the member that leads. It refuses
	// with ErrInvalidArgument, changing nothing, removing the last voter,
	// the leading member itself, or a voter whose removal would leave the
	// remaining voters without a majority of reachable members. Errors:
	// ErrNotLeader, ErrInvalidArgument, ErrUnavailable, ErrClosed.
	RemoveVoter(ctx context.Context, id string) error
}

// ForceRemover is the part of a MembershipManager (declared with
// Capabilities.Membership) that removes a member that is gone for good
// when RemoveVoter would refuse because the remaining voters do not
// include a caught-up majority (members that are reachable but behind).
// It still refuses, with ErrInvalidArgument and changing nothing, the last
// voter, the leading member, and a removal that leaves fewer reachable
// voters than a quorum (no commit would be possible, the undo included).
// Errors: as RemoveVoter's.
type ForceRemover interface {
	ForceRemoveVoter(ctx context.Context, id string) error
}

// Importer is implemented by backends that load a tree in bulk
// (Capabilities.Import): far faster than one Txn per node, and, where the
// backend declares Capabilities.ImportKeepsVersions, keeping each node's
// version and times exactly, so that conditional writes made against the
// source keep working on the target. The migration engine (package
// migrate) uses it; a backend without it is loaded with ordinary creates.
type Importer interface {
	// Import creates nodes as persistent nodes, atomically (all of them or
	// none), in order: a node's parent must exist or come earlier in nodes.
	// Every node must be new. Slices are not retained. Errors: *TxnError
	// naming the failing node's index and wrapping ErrNodeExists,
	// ErrNoParent, ErrInvalidPath or ErrTooLarge; ErrInvalidArgument (no
	// nodes, too many, a negative version); ErrFenced (fence not current),
	// ErrNotLeader, ErrUnavailable, ErrClosed, context errors (the outcome
	// is then unknown: the batch may have been applied).
	Import(ctx context.Context, nodes []ImportNode, fence Fence) error
}

// MaxImportBatch is the most nodes one Import call may carry; a caller
// splits larger trees (and keeps a batch's data well under what one
// replicated entry holds).
const MaxImportBatch = 1000

// ImportNode is one node of a bulk import.
type ImportNode struct {
	// Path is the node's absolute path.
	Path string
	// Data is the node's value.
	Data []byte
	// Version is the node's version (the number of sets since its
	// creation), kept where the backend declares ImportKeepsVersions.
	Version int64
	// CreateTime and ModifyTime (milliseconds since the Unix epoch, as in
	// Stat) are kept where the backend declares ImportKeepsVersions; zero
	// means the import's own time.
	CreateTime, ModifyTime int64
	// NextSequence is the suffix the node's next sequential child gets, so
	// a suffix used on the source is never handed out again; 0 means the
	// number of its children.
	NextSequence int64
}

// LeadershipTransferer is implemented by replicated backends that can hand
// their consensus leadership to a chosen member (Capabilities.
// LeadershipTransfer).
type LeadershipTransferer interface {
	// TransferLeadership, on the member that leads, hands the leadership to
	// the voter to (a MemberStatus.ID; empty: the most caught-up other
	// voter) and waits, bounded by ctx, until that member leads. The
	// target must be a voter other than this member and caught up (the
	// backend says how far behind is too far). Errors: ErrNotLeader (this
	// member does not lead), ErrInvalidArgument (no such member, not a
	// voter, this member, not caught up), ErrUnavailable (the leadership
	// did not move in time; it may still move), ErrClosed.
	TransferLeadership(ctx context.Context, to string) (LeadershipTransfer, error)
}

// SessionExpirer is implemented by backends that can expire the client's
// own session on demand, as its timeout would (Capabilities.SessionExpiry).
// The conformance suite uses it (across the plugin boundary too) to test
// expiry; operators never need it.
type SessionExpirer interface {
	// ExpireSession expires the client's session now: its ephemerals are
	// deleted, SessionExpired is delivered, then a new session is
	// established. Errors: ErrUnavailable, ErrClosed, context errors.
	ExpireSession(ctx context.Context) error
}

// SnapshotStreamer is implemented by backends that read a consistent tree
// in pages (Capabilities.StreamedSnapshots), so that neither they nor
// their caller hold a whole copy of a large tree at once (a plugin sends
// the pages as they are read). Use the StreamSnapshot function, which
// falls back to one Snapshot on a backend without this part.
type SnapshotStreamer interface {
	// StreamSnapshot calls fn with the nodes at or below prefix as of one
	// revision (rev, the same in every call), in Snapshot's order (by
	// path), a page at a time: about pageBytes of paths and data a page (a
	// larger node alone; pageBytes <= 0: a default of 1 MiB). An empty
	// tree is one call with no nodes. The nodes are fn's only for the
	// call: it must copy what it keeps. An error from fn stops the stream
	// and is returned. Errors: ErrInvalidPath, ErrUnavailable, ErrClosed,
	// context errors (cancelling ctx stops the stream).
	StreamSnapshot(ctx context.Context, prefix string, pageBytes int, fn func(rev int64, nodes []Node) error) error
}

// DefaultSnapshotPageBytes is StreamSnapshot's page size when the caller
// gives none.
const DefaultSnapshotPageBytes = 1 << 20

// StreamSnapshot reads b's tree at or below prefix in pages, as
// SnapshotStreamer.StreamSnapshot does: through b's own part when it
// declares one, else from one Snapshot handed to fn in pages (the whole
// copy is then held by this call, though fn sees it a page at a time).
func StreamSnapshot(ctx context.Context, b MetadataBackend, prefix string, pageBytes int, fn func(rev int64, nodes []Node) error) error {
	if pageBytes <= 0 {
		pageBytes = DefaultSnapshotPageBytes
	}
	if ss, ok := Optional[SnapshotStreamer](b); ok {
		return ss.StreamSnapshot(ctx, prefix, pageBytes, fn)
	}
	snap, err := b.Snapshot(ctx, prefix)
	if err != nil {
		return err
	}
	return PageNodes(snap.Nodes, pageBytes, func(nodes []Node) error { return fn(snap.Revision, nodes) })
}

// PageNodes calls fn with nodes in pages of about pageBytes of paths and
// data (a larger node alone); nodes empty: one call with none.
func PageNodes(nodes []Node, pageBytes int, fn func([]Node) error) error {
	start, size := 0, 0
	for i, n := range nodes {
		if i > start && size+len(n.Path)+len(n.Data) > pageBytes {
			if err := fn(nodes[start:i]); err != nil {
				return err
			}
			start, size = i, 0
		}
		size += len(n.Path) + len(n.Data)
	}
	if start < len(nodes) || len(nodes) == 0 {
		return fn(nodes[start:])
	}
	return nil
}

// HistoryCompactor is implemented by providers (not clients) whose change
// history can be dropped on demand: a test hook for the conformance suite's
// compaction properties, served across the plugin boundary. Production
// backends need not implement it.
type HistoryCompactor interface {
	// CompactHistory drops the history up to and including revision, so
	// that a watch from it fails with ErrCompacted. Errors: ErrClosed,
	// context errors.
	CompactHistory(ctx context.Context, revision int64) error
}

// Unwrapper is implemented by wrappers of a backend (metrics, test
// decorators, the plugin client's optional-part layers): Unwrap returns the
// backend wrapped. A wrapper implements the required contract and Unwrap,
// and never re-implements an optional part, so Optional finds exactly the
// parts the wrapped backend declares.
type Unwrapper interface {
	Unwrap() MetadataBackend
}

// Optional returns b's optional part T (LeaseManager, IDAllocator,
// MembershipManager, FaultInjector, SessionExpirer, Importer,
// LeadershipTransferer, or a part of a later version) and true when b, or a
// backend b wraps (following Unwrap), both implements T and declares it in
// its Capabilities (Leases, NativeIDAllocation, Membership (also for
// ForceRemover), FaultInjection,
// SessionExpiry, Import, LeadershipTransfer, StreamedSnapshots; a part
// core has no capability for is found by its methods alone). Otherwise it
// returns the zero T and false. It does not block.
func Optional[T any](b MetadataBackend) (T, bool) {
	var zero T
	for depth := 0; b != nil && depth < 64; depth++ {
		if t, ok := b.(T); ok && declares[T](b.Capabilities()) {
			return t, true
		}
		u, ok := b.(Unwrapper)
		if !ok {
			break
		}
		b = u.Unwrap()
	}
	return zero, false
}

// declares reports whether caps declare the optional part T.
func declares[T any](caps Capabilities) bool {
	switch any((*T)(nil)).(type) {
	case *LeaseManager:
		return caps.Leases
	case *IDAllocator:
		return caps.NativeIDAllocation
	case *MembershipManager, *ForceRemover:
		return caps.Membership
	case *FaultInjector:
		return caps.FaultInjection
	case *SessionExpirer:
		return caps.SessionExpiry
	case *Importer:
		return caps.Import
	case *LeadershipTransferer:
		return caps.LeadershipTransfer
	case *SnapshotStreamer:
		return caps.StreamedSnapshots
	}
	return true
}

// FaultInjector is implemented by test backends to provoke failures.
type FaultInjector interface {
	// FailNextWrite makes the next Txn fail with err (before changing
	// anything).
	FailNextWrite(err error)
	// SetLatency adds d before every call; 0 removes it.
	SetLatency(d time.Duration)
	// Expiring the session on demand is SessionExpirer's job; a
	// FaultInjector backend implements that too.
}
