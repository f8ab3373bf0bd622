package config

import (
	"fmt"
	"time"

	"github.com/metaplane/metaplane/config/raftkeys"
	"github.com/metaplane/metaplane/settings"
)

// The Raft tick and the timing rules are the Raft backend's (package
// raftkeys, which imports the standard library only); the loader applies
// them at load so that a bad pair is refused naming the key.
const (
	RaftRTTMillisecond = raftkeys.RTTMillisecond
	RaftTick           = raftkeys.Tick
	KeyRaftHeartbeat   = raftkeys.KeyHeartbeat
	KeyRaftElection    = raftkeys.KeyElection
)

type (
	// RaftTimingResult is how the heartbeat and election keys map onto
	// Dragonboat's settings (see raftkeys.Timing).
	RaftTimingResult = raftkeys.Timing
	// RaftVoter is one entry of coordinator.raft.voters (see raftkeys.Voter).
	RaftVoter = raftkeys.Voter
)

// RaftTiming maps the heartbeat interval and election timeout onto
// Dragonboat's tick-based settings (see raftkeys.ComputeTiming). Errors: a
// *Error naming the key at fault.
func RaftTiming(heartbeat, election time.Duration) (RaftTimingResult, error) {
	return raftkeys.ComputeTiming(heartbeat, election)
}

// ParseRaftVoter parses one voter entry, id@host:port (see
// raftkeys.ParseVoter).
func ParseRaftVoter(s string) (RaftVoter, error) { return raftkeys.ParseVoter(s) }

// RaftVoters returns the voter set: coordinator.raft.voters parsed, or,
// when it is empty, a single voter with id RaftNodeID() on
// 127.0.0.1:coordinator.raft.port (the embedded single-node quorum).
// Entries that do not parse are skipped (Load refuses them).
func (c *Config) RaftVoters() []RaftVoter {
	r := c.Coordinator.Raft
	if len(r.Voters) == 0 {
		return []RaftVoter{{ID: c.RaftNodeID(), Host: "127.0.0.1", Port: r.Port}}
	}
	out := make([]RaftVoter, 0, len(r.Voters))
	for _, s := range r.Voters {
		if v, err := ParseRaftVoter(s); err == nil {
			out = append(out, v)
		}
	}
	return out
}

// RaftNodeID returns this coordinator's voter id: coordinator.raft.node.id,
// or 1 when it is not set.
func (c *Config) RaftNodeID() uint64 {
	if c.Coordinator.Raft.NodeID == 0 {
		return 1
	}
	return c.Coordinator.Raft.NodeID
}

// RaftTiming returns the effective Raft timing of c (see the function
// RaftTiming).
func (c *Config) RaftTiming() (RaftTimingResult, error) {
	return RaftTiming(c.Coordinator.Raft.HeartbeatInterval, c.Coordinator.Raft.ElectionTimeout)
}

// ZooKeeper's defaults that bound the session timeout a server grants: it
// clamps the requested timeout to [2, 20] ticks of its tickTime.
const (
	ZooKeeperDefaultTick = 2 * time.Second
	zooKeeperMinTicks    = 2
	zooKeeperMaxTicks    = 20
)

// ZooKeeperFailover says how long a dead ZooKeeper coordinator keeps its
// leadership: its ephemeral /coordinators/active lives until the session
// expires, so a standby takes over within the session timeout the server
// grants plus one server tick (the server expires sessions on tick
// boundaries). It is the requested zookeeper.client.session-timeout,
// clamped as a server with the default tickTime of 2s would (to [4s, 40s]);
// a server with another tickTime clamps to [2, 20] of its ticks.
func (c *Config) ZooKeeperFailover() string {
	req := c.ZooKeeper.Client.SessionTimeout
	granted := min(max(req, zooKeeperMinTicks*ZooKeeperDefaultTick), zooKeeperMaxTicks*ZooKeeperDefaultTick)
	clamp := ""
	if granted != req {
		clamp = fmt.Sprintf(", which a server with the default tickTime of %s grants as %s",
			settings.FormatDuration(ZooKeeperDefaultTick), settings.FormatDuration(granted))
	}
	return fmt.Sprintf("failover: a coordinator that dies keeps the leadership until its ZooKeeper session expires: a standby takes over within the session timeout plus one server tick (zookeeper.client.session-timeout=%s%s; a server clamps it to 2-20 of its ticks)",
		settings.FormatDuration(req), clamp)
}
