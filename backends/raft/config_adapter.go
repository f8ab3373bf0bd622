package raft

import (
	"fmt"

	"github.com/metaplane/metaplane/config/raftkeys"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/settings"
)

// OptionsFromSettings builds Options from the flat settings the host hands
// Start (the coordinator.raft.* keys and the coordinator.* keys the backend
// uses); keys it does not own are ignored, absent keys take the defaults.
// With no coordinator.raft.voters the member is a single voter, id
// coordinator.raft.node.id (default 1), on 127.0.0.1:coordinator.raft.port.
// Errors wrap core.ErrInvalidArgument and name every key at fault.
func OptionsFromSettings(m map[string]string) (Options, error) {
	r := settings.NewReader(m)
	var (
		o      Options
		voters []string
		segs   settings.Size
		ret    int64
		nodeID uint64
	)
	o.Port = 9124
	r.List("coordinator.raft.voters", &voters)
	r.Uint64("coordinator.raft.node.id", &nodeID)
	r.Int("coordinator.raft.port", &o.Port)
	r.String("coordinator.raft.dir", &o.Dir)
	r.Duration("coordinator.raft.heartbeat.interval", &o.Heartbeat)
	r.Duration("coordinator.raft.election.timeout", &o.ElectionTimeout)
	r.Duration("coordinator.raft.first-election.timeout", &o.FirstElectionTimeout)
	r.Duration("coordinator.raft.catchup.timeout", &o.CatchupTimeout)
	r.Uint64("coordinator.raft.snapshot.trigger.threshold", &o.SnapshotThreshold)
	r.Size("coordinator.raft.log.segment-size", &segs)
	r.Int64("coordinator.raft.change-log.retention", &ret)
	r.Int64("coordinator.raft.id-block-size", &o.IDBlockSize)
	r.Duration("coordinator.tablet-server.session-timeout", &o.SessionTimeout)
	r.Duration("coordinator.metadata-stream.max-wait", &o.MetadataStreamMaxWait)
	r.Bool("coordinator.raft.tls.enabled", &o.TLS)
	r.String("coordinator.raft.tls.ca-file", &o.CAFile)
	r.String("coordinator.raft.tls.cert-file", &o.CertFile)
	r.String("coordinator.raft.tls.key-file", &o.KeyFile)
	r.String("coordinator.raft.logdb.profile", &o.LogDBProfile)
	r.Bool("coordinator.raft.join", &o.Join)
	r.Uint64("coordinator.raft.cluster-id", &o.ClusterID)
	var minFree settings.Size
	r.Size("coordinator.raft.disk.min-free", &minFree)
	probs := settings.Problems(r.Problems())
	o.SegmentSize, o.ChangeLogRetention, o.DiskMinFree = int64(segs), ret, int64(minFree)
	if nodeID == 0 {
		nodeID = 1
	}
	o.NodeID = nodeID
	if len(voters) == 0 {
		o.Voters = []Voter{{ID: nodeID, Address: fmt.Sprintf("127.0.0.1:%d", o.Port)}}
	}
	for _, s := range voters {
		v, err := raftkeys.ParseVoter(s)
		if err != nil {
			probs.Add("coordinator.raft.voters", err.Error())
			continue
		}
		o.Voters = append(o.Voters, Voter{ID: v.ID, Address: v.Address()})
	}
	if err := probs.Err(); err != nil {
		return Options{}, fmt.Errorf("%w: %v", core.ErrInvalidArgument, err)
	}
	o = o.withDefaults()
	if err := o.Validate(); err != nil {
		return Options{}, err
	}
	return o, nil
}
