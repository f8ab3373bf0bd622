package core

import (
	"fmt"
	"strconv"
	"time"
)

// AnyVersion, as an expected version, matches every version of a node.
const AnyVersion int64 = -1

// Stat is a node's metadata.
type Stat struct {
	// Version counts the sets of the node's data: 0 at creation, +1 per set.
	Version int64
	// CreateRevision and ModifyRevision are the store revisions (a global,
	// strictly increasing number: the zxid on ZooKeeper, the Raft log index
	// on Raft) of the node's creation and last change of data.
	CreateRevision int64
	ModifyRevision int64
	// CreateTime and ModifyTime are wall-clock times in milliseconds since
	// the Unix epoch, as the backend recorded them.
	CreateTime int64
	ModifyTime int64
	// EphemeralOwner is the owning session id of an ephemeral node, 0 for a
	// persistent one.
	EphemeralOwner int64
	// NumChildren is the number of direct children.
	NumChildren int32
	// DataLength is len(data).
	DataLength int32
	// ChildrenRevision is the store revision of the last creation or
	// deletion of a direct child (ZooKeeper's pzxid), at least
	// CreateRevision; 0 when the backend does not record it (then only a
	// listing tells whether the children changed). It does not move for
	// changes deeper down, nor for a child's data.
	ChildrenRevision int64
}

// Node is a node's data and stat.
type Node struct {
	Path string
	Data []byte
	Stat Stat
}

// CreateMode is the kind of node a create makes.
type CreateMode int32

const (
	// Persistent nodes live until deleted.
	Persistent CreateMode = 0
	// Ephemeral nodes are deleted when their owning session ends or expires.
	// They cannot have children.
	Ephemeral CreateMode = 1
	// PersistentSequential nodes get a 10-digit, zero-padded, per-parent
	// increasing suffix appended to their name.
	PersistentSequential CreateMode = 2
	// EphemeralSequential is Ephemeral and sequential.
	EphemeralSequential CreateMode = 3
)

// IsEphemeral reports whether the mode makes an ephemeral node.
func (m CreateMode) IsEphemeral() bool { return m == Ephemeral || m == EphemeralSequential }

// IsSequential reports whether the mode appends a sequence suffix.
func (m CreateMode) IsSequential() bool {
	return m == PersistentSequential || m == EphemeralSequential
}

// Valid reports whether m is one of the four modes.
func (m CreateMode) Valid() bool { return m >= Persistent && m <= EphemeralSequential }

func (m CreateMode) String() string {
	switch m {
	case Persistent:
		return "persistent"
	case Ephemeral:
		return "ephemeral"
	case PersistentSequential:
		return "persistent-sequential"
	case EphemeralSequential:
		return "ephemeral-sequential"
	}
	return fmt.Sprintf("CreateMode(%d)", int32(m))
}

// OpType is the kind of a transaction operation.
type OpType int32

const (
	OpCheck  OpType = 1 // the node exists at Version (or any version)
	OpCreate OpType = 2
	OpSet    OpType = 3
	OpDelete OpType = 4
)

func (t OpType) String() string {
	switch t {
	case OpCheck:
		return "check"
	case OpCreate:
		return "create"
	case OpSet:
		return "set"
	case OpDelete:
		return "delete"
	}
	return fmt.Sprintf("OpType(%d)", int32(t))
}

// Op is one operation of a transaction. Build it with CheckOp, CreateOp,
// SetOp or DeleteOp.
type Op struct {
	Type OpType
	Path string
	// Data is the new data of a create or set. The backend does not keep a
	// reference to it after Txn returns.
	Data []byte
	// Version is the expected version of a check, set or delete; AnyVersion
	// matches every version.
	Version int64
	// Mode is the create mode of a create.
	Mode CreateMode
	// MakeParents, on a create, first creates missing parents as empty
	// persistent nodes (in the same transaction).
	MakeParents bool
	// Lease, on an ephemeral create, makes the node belong to this lease
	// (see LeaseManager) instead of the client's own session. 0 means the
	// client's session.
	Lease int64
}

// CheckOp checks that path exists at version (AnyVersion: any version).
func CheckOp(path string, version int64) Op { return Op{Type: OpCheck, Path: path, Version: version} }

// CreateOp creates path with data in mode.
func CreateOp(path string, data []byte, mode CreateMode) Op {
	return Op{Type: OpCreate, Path: path, Data: data, Mode: mode, Version: AnyVersion}
}

// SetOp sets path's data if its version is version (AnyVersion: any).
func SetOp(path string, data []byte, version int64) Op {
	return Op{Type: OpSet, Path: path, Data: data, Version: version}
}

// DeleteOp deletes path if its version is version (AnyVersion: any).
func DeleteOp(path string, version int64) Op {
	return Op{Type: OpDelete, Path: path, Version: version}
}

// WithParents returns a copy of a create op that creates missing parents.
func (o Op) WithParents() Op { o.MakeParents = true; return o }

// OpResult is the outcome of one op of a successful transaction.
type OpResult struct {
	Type OpType
	// Path is the node's actual path: for a sequential create, with its
	// suffix.
	Path string
	// Stat is the node's stat after the op (zero for a delete).
	Stat Stat
}

// TxnResult is the outcome of a successful transaction.
type TxnResult struct {
	// Revision is the store revision at which the transaction applied.
	Revision int64
	// Results has one entry per op, in order.
	Results []OpResult
}

// Fence is a leadership's proof of currency. A write carrying a fence is
// applied only if the fence's leadership is still the current one; otherwise
// it fails with ErrFenced and changes nothing. The zero Fence means
// "unfenced".
type Fence struct {
	// Epoch is the leadership's epoch.
	Epoch int64
	// Token is backend-specific (on ZooKeeper the zkVersion of the epoch
	// node that the leader wrote; elsewhere usually equal to Epoch). Callers
	// copy fences; they never build them.
	Token int64
	// Valid distinguishes a real fence from the zero value.
	Valid bool
}

// TxnOptions are the options of a transaction.
type TxnOptions struct {
	// Fence, when valid, makes the transaction fail with ErrFenced unless
	// the fence is current.
	Fence Fence
}

// ReadOptions are the options of a read.
type ReadOptions struct {
	// Stale allows the backend to answer from a local copy that may lag
	// (a follower's applied state). Without it reads are linearizable.
	Stale bool
	// NoData omits node data (an exists-style read).
	NoData bool
}

// GetResult is one path's answer in GetMany.
type GetResult struct {
	Node Node
	// Err is nil, or wraps ErrNotFound / ErrInvalidPath for this path.
	Err error
}

// SessionState is the state of a client's session.
type SessionState int32

const (
	SessionConnected SessionState = 1 // connected; ephemerals are safe
	// SessionSuspended: the connection is lost; the session may still be
	// alive on the server (its ephemerals too) and may come back.
	SessionSuspended SessionState = 2
	// SessionExpired: the session is gone with its ephemerals. The backend
	// establishes a new session (a new id) and then reports Connected.
	SessionExpired SessionState = 3
	// SessionClosed: the client closed its session; it is final.
	SessionClosed SessionState = 4
)

func (s SessionState) String() string {
	switch s {
	case SessionConnected:
		return "connected"
	case SessionSuspended:
		return "suspended"
	case SessionExpired:
		return "expired"
	case SessionClosed:
		return "closed"
	}
	return fmt.Sprintf("SessionState(%d)", int32(s))
}

// SessionEvent is a change of the client's session state.
type SessionEvent struct {
	State     SessionState
	SessionID int64 // the session the event is about
}

// SessionInfo describes the client's current session.
type SessionInfo struct {
	ID      int64
	Timeout time.Duration
	State   SessionState
}

// EventType is the kind of a watch event.
type EventType int32

const (
	EventCreated EventType = 1
	EventUpdated EventType = 2
	EventDeleted EventType = 3
)

func (t EventType) String() string {
	switch t {
	case EventCreated:
		return "created"
	case EventUpdated:
		return "updated"
	case EventDeleted:
		return "deleted"
	}
	return fmt.Sprintf("EventType(%d)", int32(t))
}

// WatchEvent is one change under a watched prefix.
type WatchEvent struct {
	Type EventType
	Path string
	// Data and Stat are the node's state after the change (empty for a
	// delete).
	Data []byte
	Stat Stat
	// Revision is the store revision of the change.
	Revision int64
}

// WatchResponse is a batch of events delivered on a watch channel.
type WatchResponse struct {
	// Events are in revision order. With exact history every change under
	// the prefix appears exactly once; without it changes may be coalesced
	// (only the latest state of a path is reported).
	Events []WatchEvent
	// Reset, when true, means Events is the complete current state of the
	// prefix (one EventCreated per existing node): the consumer discards
	// what it knew and starts over from it. Only backends without exact
	// history send it.
	Reset bool
	// Partial, on a Reset response, means the Reset continues in the next
	// response: a large state comes in pages, each a Reset response with
	// the same Revision, every page but the last Partial. The consumer
	// has the complete state (and discards what it knew before the first
	// page) only once the page that is not Partial arrives. The pages hold
	// each node once, in path order. Never set on other responses.
	Partial bool
	// Revision is the store revision the consumer has seen everything up
	// to after applying this response.
	Revision int64
	// Err, when set, is the last response of the watch: the channel is
	// closed after it (ErrCompacted, ErrClosed, ErrUnavailable, ...).
	Err error
}

// Snapshot is a consistent read of every node under a prefix.
type Snapshot struct {
	// Revision is the store revision the snapshot reflects; watch on from
	// Revision+1.
	Revision int64
	// Nodes are sorted by path.
	Nodes []Node
}

// Candidate identifies a participant in the leader election.
type Candidate struct {
	ID      string // unique per process start (a UUID for coordinators)
	Address string // how clients reach it, e.g. "CLIENT://127.0.0.1:9123"
}

// LeaderInfo describes the current leader.
type LeaderInfo struct {
	ID      string
	Address string
	Epoch   int64
}

// Role is a member's role in the backend's replication.
type Role string

const (
	RoleLeader     Role = "leader"
	RoleFollower   Role = "follower"
	RoleCandidate  Role = "candidate"
	RoleObserver   Role = "observer"
	RoleStandalone Role = "standalone"
	RoleUnknown    Role = "unknown"
)

// MemberKind is how a member takes part in the replication's quorum.
type MemberKind string

const (
	// MemberVoter votes in elections and counts towards the quorum.
	MemberVoter MemberKind = "voter"
	// MemberNonVoting receives the log but neither votes nor counts towards
	// the quorum (a Raft learner).
	MemberNonVoting MemberKind = "non-voting"
	// MemberWitness votes but keeps no data (a Raft witness).
	MemberWitness MemberKind = "witness"
)

// MemberStatus is one replication member as the reporting member sees it.
// Everything but ID and Address is this member's knowledge, which may be
// old: LastContact says how old.
type MemberStatus struct {
	ID      string
	Address string
	Role    Role
	// Kind is the member's part in the quorum; empty where the backend
	// does not say.
	Kind MemberKind
	// MatchIndex is the log index the member is known to have (on Raft: the
	// applied index it last reported); Lag is the reporting member's commit
	// index minus MatchIndex. Both are zero when nothing recent is known.
	MatchIndex int64
	Lag        int64
	// Reachable says whether the reporting member's latest evidence about
	// the member is a contact (rather than a failed connection, or nothing
	// recent). The reporting member itself is always reachable.
	Reachable bool
	// LastContact is when the reporting member last had evidence that the
	// member was up; the zero time when it has none.
	LastContact time.Time
	// SnapshotIndex is the log index of the member's latest snapshot, where
	// known (the reporting member knows its own); 0 otherwise.
	SnapshotIndex int64
}

// Status is a backend member's view of itself.
type Status struct {
	Backend       string // "memory", "zookeeper", "raft", or a plugin's name
	MemberID      string
	Role          Role
	Epoch         int64 // the current leader epoch (Raft: term)
	LeaderID      string
	LeaderAddress string
	CommitIndex   int64
	AppliedIndex  int64
	// Revision is the latest store revision this member has applied.
	Revision int64
	// ClusterID identifies the replicated cluster (on Raft: the id written
	// at bootstrap); empty when the backend has none.
	ClusterID string
	// SnapshotIndex is the log index of this member's latest snapshot; 0
	// when it has none or the backend keeps none.
	SnapshotIndex int64
	// ProposalsFailed counts the writes this member proposed to its
	// consensus log that failed to commit (timed out, dropped, refused by
	// the consensus layer) since it started; a write the state machine
	// refused (a bad version, a fence) committed and does not count. 0 on
	// a backend without a consensus log.
	ProposalsFailed int64
	Members         []MemberStatus
	// Details holds backend-specific facts for operators.
	Details map[string]string
}

// LeadershipTransfer is the outcome of a leadership transfer: the member
// that leads now and the term (epoch) it leads in.
type LeadershipTransfer struct {
	MemberID string
	Term     int64
}

// Capabilities is what a backend supports beyond the required core. The
// conformance suite tests every declared capability and skips, by name, the
// properties of undeclared ones.
type Capabilities struct {
	// Name is the backend's name as selected ("memory", "zookeeper", ...).
	Name string
	// ExactHistory: watches deliver every change exactly once, in order,
	// from any revision the backend still keeps.
	ExactHistory bool
	// LinearizableFollowerReads: a follower serves linearizable reads.
	LinearizableFollowerReads bool
	// StaleReads: ReadOptions.Stale is served from local state.
	StaleReads bool
	// Leases: the backend implements LeaseManager.
	Leases bool
	// NativeIDAllocation: the backend implements IDAllocator natively.
	NativeIDAllocation bool
	// Membership: the backend implements MembershipManager.
	Membership bool
	// FaultInjection: the backend implements FaultInjector.
	FaultInjection bool
	// SessionExpiry: the backend implements SessionExpirer.
	SessionExpiry bool
	// Import: the backend implements Importer.
	Import bool
	// ImportKeepsVersions: Import keeps each node's version and times.
	ImportKeepsVersions bool
	// ConsensusStatus: Status reports this member's consensus view (a Raft
	// role, the term as Epoch, commit and applied index, and on the leader
	// each member's lag); the coordinator serves it as GetCoordinatorRaftStatus
	// and exports it as the metaplane_raft_* (and raft*) metrics.
	ConsensusStatus bool
	// LeadershipTransfer: the backend implements LeadershipTransferer.
	LeadershipTransfer bool
	// StreamedSnapshots: the backend implements SnapshotStreamer (a
	// consistent tree read in pages).
	StreamedSnapshots bool
	// TabletServers is how tablet servers follow this backend.
	TabletServers TabletServerMode
	// MaxValueSize is the largest node value accepted, in bytes; larger
	// values fail with ErrTooLarge. 0 means the default (1 MiB).
	MaxValueSize int
	// SelectorKey is the configuration key whose presence selects this
	// backend (e.g. "zookeeper.address"); empty for built-in defaults.
	SelectorKey string
}

// TabletServerMode is how tablet servers (the observers) register and
// follow the metadata on a backend.
type TabletServerMode int32

const (
	// TabletServersDirect: each tablet server opens a client of the
	// backend with a session of its own, registers as an ephemeral node
	// (/tabletservers/ids/<id>) and reads and watches the backend itself
	// (ZooKeeper). The zero value: it needs nothing beyond the contract.
	TabletServersDirect TabletServerMode = iota
	// TabletServersThroughCoordinator: tablet servers never reach the
	// backend; they register, heartbeat and follow the metadata stream
	// through the coordinator leader's RPCs, which hold a lease per tablet
	// server (Raft). The backend must declare Leases and ExactHistory.
	TabletServersThroughCoordinator
)

// String names the mode ("direct", "through-coordinator").
func (m TabletServerMode) String() string {
	switch m {
	case TabletServersDirect:
		return "direct"
	case TabletServersThroughCoordinator:
		return "through-coordinator"
	}
	return "TabletServerMode(" + strconv.Itoa(int(m)) + ")"
}

// DefaultMaxValueSize is the value size limit when a backend declares none.
const DefaultMaxValueSize = 1 << 20
