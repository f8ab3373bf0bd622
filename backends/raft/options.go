package raft

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/metaplane/metaplane/config/raftkeys"
)

// TickInterval is the length of Dragonboat's logical clock tick
// (NodeHostConfig.RTTMillisecond, raftkeys.Tick). Heartbeat and election
// timeouts are whole numbers of ticks.
const TickInterval = raftkeys.Tick

// Voter is one member of the initial voter set.
type Voter struct {
	// ID is the Raft replica id (>= 1).
	ID uint64
	// Address is the host:port other voters reach the member's Raft port on.
	Address string
}

// LogDB memory profiles (coordinator.raft.logdb.profile).
const (
	LogDBTiny   = "tiny"
	LogDBSmall  = "small"
	LogDBMedium = "medium"
	LogDBLarge  = "large"
)

// Options configure a Raft member. Build them with OptionsFromSettings, or
// by hand in tests; zero fields take the defaults documented on each.
type Options struct {
	// Voters is the initial voter set (coordinator.raft.voters). A single
	// voter on 127.0.0.1 when empty.
	Voters []Voter
	// NodeID is this member's replica id (coordinator.raft.node.id);
	// defaults to the only voter's id when there is exactly one.
	NodeID uint64
	// Port is the Raft port (coordinator.raft.port, default 9124), used for
	// a member missing from Voters.
	Port int
	// ListenAddress, when set, is where the member listens instead of its
	// voter address (tests put a proxy in front of it).
	ListenAddress string
	// Dir holds the Raft log and the state machine (coordinator.raft.dir).
	// Required.
	Dir string
	// Heartbeat is the upper bound of the heartbeat interval
	// (coordinator.raft.heartbeat.interval, default 500ms).
	Heartbeat time.Duration
	// ElectionTimeout is the upper bound of the randomized election timeout
	// (coordinator.raft.election.timeout, default 1s).
	ElectionTimeout time.Duration
	// FirstElectionTimeout bounds the first election of a new cluster
	// (coordinator.raft.first-election.timeout, default 300ms): Start waits
	// up to this long for a leader before returning, then returns anyway.
	FirstElectionTimeout time.Duration
	// CatchupTimeout bounds how long a new leader waits for its leader
	// record to be applied (coordinator.raft.catchup.timeout, default 30s).
	CatchupTimeout time.Duration
	// SnapshotThreshold is the number of applied entries between automatic
	// snapshots (coordinator.raft.snapshot.trigger.threshold, default
	// 10000).
	SnapshotThreshold uint64
	// SegmentSize (coordinator.raft.log.segment-size, default 8 MiB) bounds
	// the Raft log kept in memory for unapplied entries
	// (Config.MaxInMemLogSize is four segments); Dragonboat has no log
	// segments of its own.
	SegmentSize int64
	// ChangeLogRetention is how many log indexes of change history the
	// state machine keeps for watches (coordinator.raft.change-log.retention,
	// default 100000). Older revisions fail with ErrCompacted.
	ChangeLogRetention int64
	// IDBlockSize is the default id block size
	// (coordinator.raft.id-block-size, default 1000); informational here,
	// core.BlockAllocator uses it.
	IDBlockSize int64
	// SessionTimeout is the default session timeout of a client
	// (coordinator.tablet-server.session-timeout, default 30s).
	SessionTimeout time.Duration
	// MetadataStreamMaxWait bounds a FetchMetadata long poll
	// (coordinator.metadata-stream.max-wait, default 500ms).
	MetadataStreamMaxWait time.Duration
	// ProposalTimeout bounds a write that cannot commit (no quorum); it then
	// fails with ErrUnavailable. Default: 5s or 5 election timeouts,
	// whichever is larger.
	ProposalTimeout time.Duration
	// TLS enables mutual TLS between voters (coordinator.raft.tls.enabled)
	// with CAFile, CertFile and KeyFile (coordinator.raft.tls.*).
	TLS      bool
	CAFile   string
	CertFile string
	KeyFile  string
	// LogDBProfile is the LogDB memory profile: tiny, small (default),
	// medium or large (coordinator.raft.logdb.profile).
	LogDBProfile string
	// Join starts a member that joins an existing cluster (it was added with
	// AddVoter) instead of bootstrapping one (coordinator.raft.join).
	Join bool
	// ClusterID is the cluster id (Dragonboat's deployment id) of the
	// cluster this member belongs to (coordinator.raft.cluster-id; 0: not
	// set). A joining member on an empty directory takes it instead of
	// deriving one from Voters; whenever set it must equal the id in Dir.
	// The coordinator sets it for a joiner from what the running voters
	// report.
	ClusterID uint64
	// DiskMinFree is the free space of Dir below which the member pauses
	// its replica instead of letting the disk fill
	// (coordinator.raft.disk.min-free, default DefaultDiskMinFree; see
	// diskfull.go).
	DiskMinFree int64
	// Logf receives the member's log lines; default: slog's default
	// logger at info level.
	Logf func(format string, args ...any)

	// format lets a member of a multi-voter cluster format an empty Dir
	// (set by Bootstrap only; see checkFormatted).
	format bool

	// storage is the filesystem both stores write through and the disk
	// guard measures (tests inject a quota); zero: the operating system's.
	storage storage

	// logDB selects the LogDB (see logdb.go): "" is logDBDefault;
	// logDBPlain and logDBTan are for benchmarks only.
	logDB string

	// observeApply, when set, is told the span of every state-machine
	// Update and the indexes it applied (benchmarks).
	observeApply func(first, last uint64, start, end time.Time)

	// tick is the Raft tick (NodeHostConfig.RTTMillisecond); zero:
	// TickInterval. No configuration key sets it: the election benchmark
	// compares ticks at the same timeouts.
	tick time.Duration

	// noFastFailover turns off the leader watch of failover.go (the
	// election benchmark measures with and without it).
	noFastFailover bool
}

// raftTick is the Raft tick of o: o.tick, or TickInterval when unset.
func (o Options) raftTick() time.Duration {
	if o.tick == 0 {
		return TickInterval
	}
	return o.tick
}

// withDefaults returns o with zero fields set to their defaults.
func (o Options) withDefaults() Options {
	if o.Port == 0 {
		o.Port = 9124
	}
	if len(o.Voters) == 0 {
		id := o.NodeID
		if id == 0 {
			id = 1
		}
		o.Voters = []Voter{{ID: id, Address: net.JoinHostPort("127.0.0.1", strconv.Itoa(o.Port))}}
	}
	if o.NodeID == 0 && len(o.Voters) == 1 {
		o.NodeID = o.Voters[0].ID
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = 500 * time.Millisecond
	}
	if o.ElectionTimeout == 0 {
		o.ElectionTimeout = time.Second
	}
	if o.FirstElectionTimeout == 0 {
		o.FirstElectionTimeout = 300 * time.Millisecond
	}
	if o.CatchupTimeout == 0 {
		o.CatchupTimeout = 30 * time.Second
	}
	if o.SnapshotThreshold == 0 {
		o.SnapshotThreshold = 10000
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = 8 << 20
	}
	if o.ChangeLogRetention == 0 {
		o.ChangeLogRetention = 100000
	}
	if o.IDBlockSize == 0 {
		o.IDBlockSize = 1000
	}
	if o.DiskMinFree == 0 {
		o.DiskMinFree = DefaultDiskMinFree
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = 30 * time.Second
	}
	if o.MetadataStreamMaxWait == 0 {
		o.MetadataStreamMaxWait = 500 * time.Millisecond
	}
	if o.ProposalTimeout == 0 {
		o.ProposalTimeout = 5 * o.ElectionTimeout
		if o.ProposalTimeout < 5*time.Second {
			o.ProposalTimeout = 5 * time.Second
		}
	}
	if o.LogDBProfile == "" {
		o.LogDBProfile = LogDBSmall
	}
	if o.Logf == nil {
		o.Logf = func(format string, args ...any) { slog.Info(fmt.Sprintf(format, args...)) }
	}
	return o
}

// Validate reports every problem of o (after defaults) at once, each naming
// its configuration key.
func (o Options) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if o.Dir == "" {
		bad("coordinator.raft.dir", "required")
	}
	seen := map[uint64]bool{}
	found := false
	for _, v := range o.Voters {
		if v.ID == 0 {
			bad("coordinator.raft.voters", "voter %q: id must be at least 1", v.Address)
		}
		if seen[v.ID] {
			bad("coordinator.raft.voters", "voter id %d appears twice", v.ID)
		}
		seen[v.ID] = true
		if _, _, err := net.SplitHostPort(v.Address); err != nil {
			bad("coordinator.raft.voters", "voter %d: address %q is not host:port", v.ID, v.Address)
		}
		if v.ID == o.NodeID {
			found = true
		}
	}
	if o.NodeID == 0 {
		bad("coordinator.raft.node.id", "required with more than one voter")
	} else if !found && !o.Join {
		bad("coordinator.raft.node.id", "%d is not in coordinator.raft.voters (set coordinator.raft.join to join an existing cluster)", o.NodeID)
	}
	if _, _, err := electionTicks(o.Heartbeat, o.ElectionTimeout, o.raftTick()); err != nil {
		errs = append(errs, err)
	}
	switch o.LogDBProfile {
	case LogDBTiny, LogDBSmall, LogDBMedium, LogDBLarge:
	default:
		bad("coordinator.raft.logdb.profile", "%q: want tiny, small, medium or large", o.LogDBProfile)
	}
	if o.TLS {
		if o.CAFile == "" {
			bad("coordinator.raft.tls.ca-file", "required when coordinator.raft.tls.enabled is true")
		}
		if o.CertFile == "" {
			bad("coordinator.raft.tls.cert-file", "required when coordinator.raft.tls.enabled is true")
		}
		if o.KeyFile == "" {
			bad("coordinator.raft.tls.key-file", "required when coordinator.raft.tls.enabled is true")
		}
	}
	if o.ChangeLogRetention < 1 {
		bad("coordinator.raft.change-log.retention", "must be at least 1")
	}
	return errors.Join(errs...)
}

// electionTicks maps the heartbeat and election timeouts onto Dragonboat's
// ticks of length tick with raftkeys.ComputeTimingTick (ElectionRTT =
// ceil(2/5 election/tick), at most election/2/tick; HeartbeatRTT =
// min(heartbeat/tick, ElectionRTT/4), at least 1).
func electionTicks(heartbeat, election, tick time.Duration) (hb, el uint64, err error) {
	r, err := raftkeys.ComputeTimingTick(heartbeat, election, tick)
	if err != nil {
		return 0, 0, err
	}
	return r.HeartbeatRTT, r.ElectionRTT, nil
}
