package raft

import (
	"github.com/metaplane/metaplane/core"
)

// optionsFromConfig maps every coordinator.raft.* key (and the
// coordinator.* keys the backend uses) onto Options.
func optionsFromConfig(cfg *core.Config) (Options, error) {
	r := cfg.Coordinator.Raft
	o := Options{
		NodeID:                cfg.RaftNodeID(),
		Port:                  r.Port,
		Dir:                   r.Dir,
		Heartbeat:             r.HeartbeatInterval,
		ElectionTimeout:       r.ElectionTimeout,
		FirstElectionTimeout:  r.FirstElectionTimeout,
		CatchupTimeout:        r.CatchupTimeout,
		SnapshotThreshold:     r.SnapshotTriggerThreshold,
		SegmentSize:           int64(r.LogSegmentSize),
		ChangeLogRetention:    int64(r.ChangeLogRetention),
		IDBlockSize:           r.IDBlockSize,
		SessionTimeout:        cfg.Coordinator.TabletServerSessionTimeout,
		MetadataStreamMaxWait: cfg.Coordinator.MetadataStreamMaxWait,
		TLS:                   r.TLS.Enabled,
		CAFile:                r.TLS.CAFile,
		CertFile:              r.TLS.CertFile,
		KeyFile:               r.TLS.KeyFile,
		LogDBProfile:          r.LogDBProfile,
		Join:                  r.Join,
	}
	for _, v := range cfg.RaftVoters() {
		o.Voters = append(o.Voters, Voter{ID: v.ID, Address: v.Address()})
	}
	o = o.withDefaults()
	if err := o.Validate(); err != nil {
		return Options{}, err
	}
	return o, nil
}
