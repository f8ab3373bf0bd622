package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/settings"
)

// Validate checks every value and combination of c, as Load does
// (except backend selection, which needs to know which keys were set), and
// returns a *Error listing every problem, or nil. It never modifies c and
// does no file I/O (CheckFiles is the separate step that does).
// Rules that concern a Raft voter are included (see LoadOptions.Observer).
func (c *Config) Validate() error {
	var probs Problems
	c.validate(&probs, false)
	return probs.Err()
}

func (c *Config) validate(probs *Problems, observer bool) {
	r := c.Coordinator.Raft
	positive := func(key string, d time.Duration) {
		if d <= 0 {
			probs.Add(key, fmt.Sprintf("%s must be positive", settings.FormatDuration(d)))
		}
	}

	// coordinator.raft.*
	if _, err := RaftTiming(r.HeartbeatInterval, r.ElectionTimeout); err != nil {
		if ce, ok := err.(*Error); ok {
			*probs = append(*probs, ce.Problems...)
		}
	}
	if r.FirstElectionTimeout < RaftTick {
		probs.Add("coordinator.raft.first-election.timeout", fmt.Sprintf("%s is below the Raft tick of %s", settings.FormatDuration(r.FirstElectionTimeout), settings.FormatDuration(RaftTick)))
	}
	positive("coordinator.raft.catchup.timeout", r.CatchupTimeout)
	checkPort(probs, "coordinator.raft.port", r.Port)
	if strings.TrimSpace(r.Dir) == "" {
		probs.Add("coordinator.raft.dir", "must not be empty")
	}
	if r.LogSegmentSize < KiB {
		probs.Add("coordinator.raft.log.segment-size", fmt.Sprintf("%s is below the minimum of 1kb", r.LogSegmentSize))
	}
	if r.SnapshotTriggerThreshold == 0 {
		probs.Add("coordinator.raft.snapshot.trigger.threshold", "must be at least 1")
	}
	if r.IDBlockSize < 1 {
		probs.Add("coordinator.raft.id-block-size", fmt.Sprintf("%d must be at least 1", r.IDBlockSize))
	}
	if r.ChangeLogRetention == 0 {
		probs.Add("coordinator.raft.change-log.retention", "must be at least 1")
	}
	if r.DiskMinFree < MiB {
		probs.Add("coordinator.raft.disk.min-free", fmt.Sprintf("%s is below the minimum of 1mb", r.DiskMinFree))
	}
	if !contains(LogDBProfiles, r.LogDBProfile) {
		probs.Add("coordinator.raft.logdb.profile", fmt.Sprintf("unknown profile %q: want one of %s", r.LogDBProfile, strings.Join(LogDBProfiles, ", ")))
	}
	if r.TLS.Enabled {
		for _, f := range []struct{ key, path string }{
			{"coordinator.raft.tls.ca-file", r.TLS.CAFile},
			{"coordinator.raft.tls.cert-file", r.TLS.CertFile},
			{"coordinator.raft.tls.key-file", r.TLS.KeyFile},
		} {
			if f.path == "" {
				probs.Add(f.key, "required when coordinator.raft.tls.enabled is true")
			}
		}
	}
	c.validateVoters(probs, observer)

	// coordinator.*
	seen := map[string]bool{}
	for _, s := range c.Coordinator.SeedNodes {
		if _, _, err := settings.ParseHostPort(s, false); err != nil {
			probs.Add("coordinator.seed.nodes", err.Error())
		} else if seen[s] {
			probs.Add("coordinator.seed.nodes", fmt.Sprintf("%s is given twice", s))
		}
		seen[s] = true
	}
	positive("coordinator.tablet-server.session-timeout", c.Coordinator.TabletServerSessionTimeout)
	positive("coordinator.metadata-stream.max-wait", c.Coordinator.MetadataStreamMaxWait)
	if c.Coordinator.MetadataStreamMaxSnapshots < 1 {
		probs.Add("coordinator.metadata-stream.max-concurrent-snapshots", fmt.Sprintf("%d must be at least 1", c.Coordinator.MetadataStreamMaxSnapshots))
	}
	positive("coordinator.request-records.retention", c.Coordinator.RequestRetention)
	if c.Coordinator.GCHeadroom < 0 {
		probs.Add("coordinator.memory.gc-headroom", fmt.Sprintf("%s must not be negative (0 leaves the collector to Go's default)", c.Coordinator.GCHeadroom))
	}
	if c.Coordinator.MaxRequestRecords < 1 {
		probs.Add("coordinator.request-records.max", fmt.Sprintf("%d must be at least 1", c.Coordinator.MaxRequestRecords))
	}
	checkPort(probs, "coordinator.gossip.port", c.Coordinator.Gossip.Port)
	if c.Coordinator.Gossip.Enabled && c.Coordinator.Gossip.Port == r.Port {
		probs.Add("coordinator.gossip.port", fmt.Sprintf("%d is also coordinator.raft.port", r.Port))
	}
	c.validateGossip(probs)

	// zookeeper.*
	for _, a := range c.ZooKeeper.Address {
		addr := a
		if host, chroot, ok := strings.Cut(a, "/"); ok {
			probs.Add("zookeeper.address", fmt.Sprintf("address %q: a chroot suffix (/%s) is refused: set zookeeper.path.root: /%s and zookeeper.address: %s", a, chroot, chroot, host))
		} else if _, _, err := splitHostMaybePort(a); err != nil {
			probs.Add("zookeeper.address", err.Error())
		} else if seen["zk:"+addr] {
			probs.Add("zookeeper.address", fmt.Sprintf("%s is given twice", a))
		}
		seen["zk:"+addr] = true
	}
	if err := core.ValidatePath(c.ZooKeeper.PathRoot); err != nil {
		probs.Add("zookeeper.path.root", fmt.Sprintf("%q is not a valid absolute znode path", c.ZooKeeper.PathRoot))
	} else if c.ZooKeeper.PathRoot == "/" {
		probs.Add("zookeeper.path.root", "must not be / (the tree needs a znode of its own, such as /fluss)")
	}
	zc := c.ZooKeeper.Client
	positive("zookeeper.client.session-timeout", zc.SessionTimeout)
	positive("zookeeper.client.connection-timeout", zc.ConnectionTimeout)
	positive("zookeeper.client.retry-wait", zc.RetryWait)
	if zc.MaxRetryAttempts < 0 {
		probs.Add("zookeeper.client.max-retry-attempts", fmt.Sprintf("%d must not be negative", zc.MaxRetryAttempts))
	}
	if zc.MaxInflightRequests < 1 {
		probs.Add("zookeeper.client.max-inflight-requests", fmt.Sprintf("%d must be at least 1", zc.MaxInflightRequests))
	}
	if zc.MaxBufferSize < KiB {
		probs.Add("zookeeper.client.max-buffer-size", fmt.Sprintf("%s is below the minimum of 1kb", zc.MaxBufferSize))
	}

	// metadata.backend.* (default is checked by the selector)
	if s := c.Metadata.Backend.PluginSHA256; s != "" {
		if b, err := hex.DecodeString(s); err != nil || len(b) != 32 {
			probs.Add("metadata.backend.plugin.sha256", "want 64 hexadecimal digits (a SHA-256 digest)")
		}
	}

	// process keys
	before := len(*probs)
	names := c.validateListeners(probs, KeyBindListeners, c.BindListeners, nil)
	c.validateListeners(probs, KeyAdvertisedListeners, c.AdvertisedListeners, names)
	if n := strings.TrimSpace(c.InternalListenerName); n != "" && !validListenerName(n) {
		probs.Add(KeyInternalListenerName, fmt.Sprintf("%q is not a listener name (letters, digits, _)", c.InternalListenerName))
	}
	if len(*probs) == before {
		if _, err := c.ClientListener(); err != nil {
			var ke *keyError
			if errors.As(err, &ke) {
				probs.Add(ke.key, ke.msg)
			}
		}
	}
	if !contains(LogLevels, strings.ToLower(c.Log.Level)) {
		probs.Add("log.level", fmt.Sprintf("unknown level %q: want one of %s", c.Log.Level, strings.Join(LogLevels, ", ")))
	}
	if !contains(LogFormats, strings.ToLower(c.Log.Format)) {
		probs.Add("log.format", fmt.Sprintf("unknown format %q: want one of %s", c.Log.Format, strings.Join(LogFormats, ", ")))
	}
	c.validateSecurity(probs, names, observer)
	c.validateAuth(probs, observer)
	if _, _, err := settings.ParseHostPort(c.MetricsAddress, true); err != nil {
		probs.Add("metrics.address", err.Error())
	}
	if c.TabletServerID < -1 {
		probs.Add("tablet-server.id", fmt.Sprintf("%d must be at least 0 (or -1: not set)", c.TabletServerID))
	}
	if !contains(MetadataStreamSources, c.TabletServerMetadataStream) {
		probs.Add("tablet-server.metadata-stream.source", fmt.Sprintf("unknown source %q: want one of %s",
			c.TabletServerMetadataStream, strings.Join(MetadataStreamSources, ", ")))
	}
	if c.MaxBucketNum < 1 || c.MaxBucketNum > math.MaxInt32 {
		probs.Add("max.bucket.num", fmt.Sprintf("%d is out of range: want 1 to %d", c.MaxBucketNum, math.MaxInt32))
	}
	if c.MaxPartitionNum < 1 || c.MaxPartitionNum > math.MaxInt32 {
		probs.Add("max.partition.num", fmt.Sprintf("%d is out of range: want 1 to %d", c.MaxPartitionNum, math.MaxInt32))
	}
	if strings.TrimSpace(c.DataDir) == "" {
		probs.Add("data.dir", "must not be empty")
	}
}

func (c *Config) validateVoters(probs *Problems, observer bool) {
	const key = "coordinator.raft.voters"
	r := c.Coordinator.Raft
	if len(r.Voters) == 0 {
		if !observer && len(c.Coordinator.SeedNodes) > 1 {
			probs.Add(key, fmt.Sprintf("required when coordinator.seed.nodes lists more than one coordinator (%d): give every coordinator the same list of id@host:port", len(c.Coordinator.SeedNodes)))
		}
		return
	}
	ids := map[uint64]string{}
	addrs := map[string]string{}
	var idList []string
	var self *RaftVoter
	for _, s := range r.Voters {
		v, err := ParseRaftVoter(s)
		if err != nil {
			probs.Add(key, err.Error())
			continue
		}
		if prev, dup := ids[v.ID]; dup {
			probs.Add(key, fmt.Sprintf("id %d is given twice (%q and %q)", v.ID, prev, s))
			continue
		}
		if prev, dup := addrs[v.Address()]; dup {
			probs.Add(key, fmt.Sprintf("address %s is given twice (%q and %q)", v.Address(), prev, s))
		}
		ids[v.ID] = s
		addrs[v.Address()] = s
		idList = append(idList, strconv.FormatUint(v.ID, 10))
		if v.ID == r.NodeID {
			vv := v
			self = &vv
		}
	}
	if observer {
		return
	}
	sort.Slice(idList, func(i, j int) bool {
		return len(idList[i]) < len(idList[j]) || (len(idList[i]) == len(idList[j]) && idList[i] < idList[j])
	})
	switch {
	case r.NodeID == 0:
		probs.Add("coordinator.raft.node.id", fmt.Sprintf("required when coordinator.raft.voters is set: this coordinator's id, one of %s", strings.Join(idList, ", ")))
	case self == nil:
		if len(idList) > 0 {
			probs.Add("coordinator.raft.node.id", fmt.Sprintf("%d is not among the voters' ids (%s)", r.NodeID, strings.Join(idList, ", ")))
		}
	case self.Port != r.Port:
		probs.Add("coordinator.raft.port", fmt.Sprintf("%d differs from the port of this node's voter entry %s: they must agree", r.Port, self))
	}
}

// validateListeners checks NAME://host:port entries; names, when not nil,
// are the names the entries must use. It returns the names seen.
func (c *Config) validateListeners(probs *Problems, key string, ls []string, allowed map[string]bool) map[string]bool {
	seen := map[string]bool{}
	for _, s := range ls {
		l, err := ParseListener(s)
		if err != nil {
			probs.Add(key, err.Error())
			continue
		}
		name := l.Name
		if seen[name] {
			probs.Add(key, fmt.Sprintf("listener name %s is given twice", name))
		}
		seen[name] = true
		if allowed != nil && !allowed[name] {
			probs.Add(key, fmt.Sprintf("listener name %s is not one of bind.listeners' names", name))
		}
	}
	return seen
}

func validListenerName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z', r == '_':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// splitHostMaybePort accepts host or host:port (a ZooKeeper server).
func splitHostMaybePort(s string) (string, int, error) {
	if strings.Contains(s, ":") && !strings.HasSuffix(s, "]") && strings.Count(s, ":") == 1 || strings.HasPrefix(s, "[") && strings.Contains(s, "]:") {
		return settings.ParseHostPort(s, false)
	}
	h := strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if h == "" || strings.ContainsAny(h, " /@,\t") {
		return "", 0, fmt.Errorf("address %q: want host or host:port", s)
	}
	return h, 2181, nil
}

func checkPort(probs *Problems, key string, p int) {
	if p < 1 || p > 65535 {
		probs.Add(key, fmt.Sprintf("%d is not a port in 1..65535", p))
	}
}

// The values of tablet-server.metadata-stream.source.
const (
	MetadataStreamFromAny    = "any"
	MetadataStreamFromLeader = "leader"
)

// MetadataStreamSources are the values tablet-server.metadata-stream.source takes.
var MetadataStreamSources = []string{MetadataStreamFromAny, MetadataStreamFromLeader}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// CheckFiles checks what Validate cannot without the filesystem: that
// every file the configuration names can be read and holds what its key
// says. The TLS files (coordinator.raft.tls.* when
// coordinator.raft.tls.enabled, security.tls.* when set) are parsed: each
// certificate file must hold PEM certificates that are valid now (not
// expired, not before their start), each key file a PEM private key that
// matches its certificate. It is the separate step of `metaplane config
// validate`, which Load also runs; a process checks the files again where
// it opens them. Errors: a *Error naming each key at fault.
func (c *Config) CheckFiles() error {
	var probs Problems
	now := time.Now()
	if r := c.Coordinator.Raft.TLS; r.Enabled {
		checkTLSFiles(&probs, now, "coordinator.raft.tls.cert-file", r.CertFile, "coordinator.raft.tls.key-file", r.KeyFile,
			"coordinator.raft.tls.ca-file", r.CAFile)
	}
	t := c.Security.TLS
	checkTLSFiles(&probs, now, "security.tls.cert-file", t.CertFile, "security.tls.key-file", t.KeyFile, "security.tls.ca-file", t.CAFile)
	c.checkGossipKeyFile(&probs)
	c.checkAuthFiles(&probs)
	return probs.Err()
}

// shortErr drops the path os.Stat repeats.
func shortErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
