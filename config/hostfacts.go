package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Fact is one line the host prints about the running backend (the
// coordinator's start-up banner), with the same facts as log attributes.
type Fact struct {
	Line  string
	Attrs []any
}

// hostRole is what the host does for a built-in backend beyond starting
// its plugin: declared here, per backend, so that no code outside this
// package branches on a backend's name.
type hostRole struct {
	// learnsClusterID: a member started with coordinator.raft.join asks
	// the coordinators at coordinator.seed.nodes for the cluster id before
	// its plugin starts (LearnsClusterIDOnJoin).
	learnsClusterID bool
	// raftData: the backend's member keeps its data in
	// coordinator.raft.dir, which the offline Raft verbs work on.
	raftData bool
	// facts are the banner's lines about the backend; notes what config
	// validate says of it.
	facts func(c *Config) []Fact
	notes func(c *Config) []string
}

var hostRoles = map[string]hostRole{
	BackendRaft:      {learnsClusterID: true, raftData: true, facts: raftFacts, notes: raftNotes},
	BackendZooKeeper: {facts: zookeeperFacts, notes: func(c *Config) []string { return []string{c.ZooKeeperFailover()} }},
}

// LearnsClusterIDOnJoin reports whether the selected backend's member,
// started with coordinator.raft.join, takes its cluster id from the
// coordinators at coordinator.seed.nodes (the coordinator asks them before
// its plugin starts).
func (c *Config) LearnsClusterIDOnJoin() bool {
	return hostRoles[c.Selected.Backend].learnsClusterID && c.Coordinator.Raft.Join
}

// KeepsRaftData reports whether the selected backend's member keeps its
// data in coordinator.raft.dir (what the offline Raft verbs work on).
func (c *Config) KeepsRaftData() bool { return hostRoles[c.Selected.Backend].raftData }

// BackendFacts are the start-up banner's lines about the backend named
// running (the plugin that runs, which --plugin may make another than the
// selected one): none for a backend without a declared role.
func (c *Config) BackendFacts(running string) []Fact {
	if f := hostRoles[running].facts; f != nil {
		return f(c)
	}
	return nil
}

// BackendNotes are what config validate notes about the selected backend.
func (c *Config) BackendNotes() []string {
	if n := hostRoles[c.Selected.Backend].notes; n != nil {
		return n(c)
	}
	return nil
}

func raftFacts(c *Config) []Fact {
	self := c.RaftNodeID()
	for _, v := range c.RaftVoters() {
		if v.ID == self {
			addr := net.JoinHostPort(v.Host, strconv.Itoa(v.Port))
			return []Fact{{Line: fmt.Sprintf("raft:     voter %d of %d on %s, data in %s", v.ID, len(c.RaftVoters()), addr, c.Coordinator.Raft.Dir),
				Attrs: []any{"raft_voter", v.ID, "raft_voters", len(c.RaftVoters()), "raft_address", addr, "raft_dir", c.Coordinator.Raft.Dir}}}
		}
	}
	return nil
}

func zookeeperFacts(c *Config) []Fact {
	return []Fact{
		{Line: fmt.Sprintf("zookeeper: %s (root %s)", strings.Join(c.ZooKeeper.Address, ","), c.ZooKeeper.PathRoot),
			Attrs: []any{"zookeeper", strings.Join(c.ZooKeeper.Address, ","), "zookeeper_root", c.ZooKeeper.PathRoot}},
		{Line: c.ZooKeeperFailover()},
	}
}

func raftNotes(c *Config) []string {
	var notes []string
	if len(c.Coordinator.Raft.Voters) == 0 {
		v := c.RaftVoters()[0]
		notes = append(notes, fmt.Sprintf("no coordinator.raft.voters: a single-voter embedded quorum, voter %s", v))
	} else {
		notes = append(notes, fmt.Sprintf("voters: %d, this node %d", len(c.RaftVoters()), c.RaftNodeID()))
	}
	if t, err := c.RaftTiming(); err == nil {
		notes = append(notes, t.Summary())
		if t.Note != "" {
			notes = append(notes, t.Note)
		}
	}
	return notes
}
