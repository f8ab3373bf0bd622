package config

import (
	"time"
)

// Config is metaplane's typed configuration: every key the design documents
// name, with their defaults. It is loaded and validated in one place
// (Load) and never edited by
// validation. Each field's comment gives its key and its default; the
// `koanf` tags give the key's segments below the enclosing struct's key
// (docs/configuration.md is the operator's reference).
//
// A Config is a plain value: it is safe to read from many goroutines once
// loaded, and not safe to modify concurrently.
type Config struct {
	// Coordinator holds the coordinator.* keys.
	Coordinator CoordinatorConfig `koanf:"coordinator"`
	// ZooKeeper holds the zookeeper.* keys (the deprecated backend).
	ZooKeeper ZooKeeperConfig `koanf:"zookeeper"`
	// Metadata holds the metadata.backend.* keys.
	Metadata MetadataConfig `koanf:"metadata"`
	// Security holds the security.* keys (listener TLS; security.go).
	Security SecurityConfig `koanf:"security"`
	// Authorizer holds the authorizer.* keys (auth.go).
	Authorizer AuthorizerConfig `koanf:"authorizer"`
	// SuperUsers, key super.users, default empty: the principals the
	// authorizer allows everything, ';'-separated as the original's
	// (User:admin;User:ops).
	SuperUsers string `koanf:"super.users"`
	// ClientSASL holds the client.security.sasl.* keys: the username and
	// password a tablet server presents to a SASL_SSL listener (auth.go).
	ClientSASL ClientSASLConfig `koanf:"client.security.sasl"`

	// BindListeners, key bind.listeners, default [CLIENT://127.0.0.1:9123]:
	// the listeners of the server, each NAME://host:port (port 0 picks a
	// free port). metaplane binds one of them, the client listener (see
	// ClientListener); the others are checked and not bound.
	BindListeners []string `koanf:"bind.listeners"`
	// AdvertisedListeners, key advertised.listeners, default empty (advertise
	// the bind listeners): the addresses given to others, each
	// NAME://host:port, NAME one of the bind listeners' names. The client
	// listener's entry is what a coordinator publishes as its address and
	// a tablet server registers.
	AdvertisedListeners []string `koanf:"advertised.listeners"`
	// ClientListenerName, key client.listener.name, default empty: the
	// name of the bind.listeners entry that serves clients when there are
	// several (see ClientListener).
	ClientListenerName string `koanf:"client.listener.name"`
	// InternalListenerName, key internal.listener.name, default FLUSS (the
	// original's): the listener the original system uses between its
	// servers. metaplane does not serve it; with several bind.listeners
	// and no client.listener.name, the client listener is the one
	// listener not named by it.
	InternalListenerName string `koanf:"internal.listener.name"`
	// Log holds the log.* keys.
	Log LogConfig `koanf:"log"`
	// MetricsAddress, key metrics.address, default 127.0.0.1:9249: where
	// the Prometheus metrics endpoint listens (host:port; port 0 picks a
	// free port).
	MetricsAddress string `koanf:"metrics.address"`
	// MetricsPprof, key metrics.pprof, default false: also serve Go's
	// profiles (net/http/pprof, under /debug/pprof/) on the metrics
	// listener of a coordinator.
	MetricsPprof bool `koanf:"metrics.pprof"`
	// TabletServerID, key tablet-server.id, default -1 (not set): this
	// process's tablet-server id when it runs as a tablet server
	// (observer); at least 0 when set.
	TabletServerID int `koanf:"tablet-server.id"`
	// TabletServerMetadataStream, key
	// tablet-server.metadata-stream.source, default "any": where a tablet
	// server (Raft mode) fetches the metadata stream from: "any" spreads
	// the tablet servers over the coordinators (each serves its own
	// applied change log), "leader" fetches from the leader only.
	TabletServerMetadataStream string `koanf:"tablet-server.metadata-stream.source"`
	// DataDir, key data.dir, default ./data: the directory the process
	// keeps its state in: coordinator.raft.dir defaults to <data.dir>/raft
	// (resolved when the configuration is loaded).
	DataDir string `koanf:"data.dir"`
	// MaxBucketNum, key max.bucket.num, default 20000 (the original's):
	// the most buckets a table (and each partition of a partitioned table)
	// may have; 1 to 2147483647. A create-table asking for more is refused
	// before anything is built.
	MaxBucketNum int `koanf:"max.bucket.num"`
	// MaxPartitionNum, key max.partition.num, default 1000 (the
	// original's): the most partitions a partitioned table may have; at
	// least 1.
	MaxPartitionNum int `koanf:"max.partition.num"`

	// Extra holds the raw settings under the key prefixes of third-party
	// backends passed to Load in LoadOptions.ExtraBackends (the
	// selector key itself and every key under its first segment, e.g.
	// "etcd.endpoints", "etcd.dial-timeout"), flattened to strings (a list
	// is joined with ","). They are handed to the plugin unchecked. Nil
	// when there are none. Not a key.
	Extra map[string]string `koanf:"-"`

	// Present records which keys Load's sources set (nil after Default).
	// Not a key.
	Present PresenceSet `koanf:"-"`

	// Selected is the backend selection Load made (see SelectBackend).
	// It is the zero Selection after Default, which does not select.
	// Not a key.
	Selected Selection `koanf:"-"`
}

// LogConfig holds the log.* keys: the process's logs on stderr.
type LogConfig struct {
	// Level, key log.level, default info: the lowest level logged, one
	// of LogLevels. Plugins log at the same level.
	Level string `koanf:"level"`
	// Format, key log.format, default text: one of LogFormats; text is
	// key=value lines (logfmt), json one JSON object per line.
	Format string `koanf:"format"`
}

// LogLevels lists the accepted values of log.level, lowest first.
var LogLevels = []string{"debug", "info", "warn", "error"}

// LogFormats lists the accepted values of log.format.
var LogFormats = []string{"text", "json"}

// CoordinatorConfig holds the coordinator.* keys.
type CoordinatorConfig struct {
	// Raft holds the coordinator.raft.* keys.
	Raft RaftConfig `koanf:"raft"`
	// SeedNodes, key coordinator.seed.nodes, default empty: the
	// coordinators' client addresses (host:port) that tablet servers use to
	// find a coordinator. Setting it selects the Raft backend.
	SeedNodes []string `koanf:"seed.nodes"`
	// TabletServerSessionTimeout, key
	// coordinator.tablet-server.session-timeout, default 30s: the lease of
	// a registered tablet server; a tablet server silent for this long is
	// fenced and its registration deleted.
	TabletServerSessionTimeout time.Duration `koanf:"tablet-server.session-timeout"`
	// MetadataStreamMaxWait, key coordinator.metadata-stream.max-wait,
	// default 500ms: how long a metadata-stream fetch waits for new
	// changes before answering empty (long poll).
	MetadataStreamMaxWait time.Duration `koanf:"metadata-stream.max-wait"`
	// MetadataStreamMaxSnapshots, key
	// coordinator.metadata-stream.max-concurrent-snapshots, default 4: how
	// many metadata snapshots (FETCH_METADATA_SNAPSHOT) a coordinator
	// serves at once, each holding a store snapshot (or a copy of the
	// whole tree); the others wait their turn.
	MetadataStreamMaxSnapshots int `koanf:"metadata-stream.max-concurrent-snapshots"`
	// RequestRetention, key coordinator.request-records.retention, default
	// 24h: how long the leader keeps the record of an exactly-once admin
	// write's request id (a retry within it is answered with the original
	// result).
	RequestRetention time.Duration `koanf:"request-records.retention"`
	// MaxRequestRecords, key coordinator.request-records.max, default
	// 100000: the most request records kept (the oldest go first).
	MaxRequestRecords int `koanf:"request-records.max"`
	// Gossip holds the coordinator.gossip.* keys.
	Gossip GossipConfig `koanf:"gossip"`
	// GCHeadroom, key coordinator.memory.gc-headroom, default 64mb: how
	// far the coordinator's Go heap may grow above its live size before
	// the next collection (at least a tenth of the live size, at most the
	// live size: Go's default). 0 leaves the collector to Go's default.
	// Ignored when GOGC or GOMEMLIMIT is set in the environment.
	GCHeadroom Size `koanf:"memory.gc-headroom"`
}

// GossipConfig holds the coordinator.gossip.* keys.
type GossipConfig struct {
	// Enabled, key coordinator.gossip.enabled, default false: expand a
	// partial seed list by gossip between coordinators. Gossip never
	// changes the voter set.
	Enabled bool `koanf:"enabled"`
	// Port, key coordinator.gossip.port, default 9125: the gossip port,
	// TCP and UDP, on the host of the coordinator's client listener.
	Port int `koanf:"port"`
	// EncryptionKey, key coordinator.gossip.encryption-key, default empty
	// (plaintext): the base64 of a 16, 24 or 32 byte key that encrypts
	// and authenticates the gossip (AES-GCM). Every coordinator needs the
	// same key. At most one of EncryptionKey and EncryptionKeyFile.
	EncryptionKey string `koanf:"encryption-key"`
	// EncryptionKeyFile, key coordinator.gossip.encryption-key-file,
	// default empty: a file holding that base64 key (surrounding white
	// space ignored), so the key need not be in the configuration.
	EncryptionKeyFile string `koanf:"encryption-key-file"`
}

// RaftConfig holds the coordinator.raft.* keys.
type RaftConfig struct {
	// Voters, key coordinator.raft.voters, default empty: the static voter
	// set, each entry id@host:port (id a positive integer, port the
	// voter's coordinator.raft.port). Empty means a single voter on
	// loopback (see (*Config).RaftVoters); required when
	// coordinator.seed.nodes lists more than one coordinator.
	Voters []string `koanf:"voters"`
	// NodeID, key coordinator.raft.node.id, default 0 (not set): this
	// coordinator's voter id; must be one of Voters' ids when Voters is
	// set. With no voters it defaults to 1.
	NodeID uint64 `koanf:"node.id"`
	// Port, key coordinator.raft.port, default 9124: the Raft port
	// (coordinator to coordinator only; firewall it from clients).
	Port int `koanf:"port"`
	// Dir, key coordinator.raft.dir, default <data.dir>/raft (./data/raft):
	// the Raft log and the metadata store.
	Dir string `koanf:"dir"`
	// HeartbeatInterval, key coordinator.raft.heartbeat.interval, default
	// 500ms: an upper bound on the leader's heartbeat interval (see
	// RaftTiming for the effective value).
	HeartbeatInterval time.Duration `koanf:"heartbeat.interval"`
	// ElectionTimeout, key coordinator.raft.election.timeout, default 1s:
	// the upper bound of the randomized election timeout (see RaftTiming).
	ElectionTimeout time.Duration `koanf:"election.timeout"`
	// FirstElectionTimeout, key coordinator.raft.first-election.timeout,
	// default 300ms: how long a starting voter waits for a first leader
	// (this value plus one election timeout) before it goes on without
	// one. Dragonboat has no separate first election timeout, so it does
	// not make the first election sooner.
	FirstElectionTimeout time.Duration `koanf:"first-election.timeout"`
	// CatchupTimeout, key coordinator.raft.catchup.timeout, default 30s:
	// how long a new leader may take to apply its leader record before it
	// gives leadership up.
	CatchupTimeout time.Duration `koanf:"catchup.timeout"`
	// LogSegmentSize, key coordinator.raft.log.segment-size, default 8mb:
	// Dragonboat keeps no log segments; the unapplied Raft log held in
	// memory is bounded by four times this size.
	LogSegmentSize Size `koanf:"log.segment-size"`
	// SnapshotTriggerThreshold, key
	// coordinator.raft.snapshot.trigger.threshold, default 10000: the
	// number of applied entries after which a snapshot is taken and the
	// log compacted.
	SnapshotTriggerThreshold uint64 `koanf:"snapshot.trigger.threshold"`
	// IDBlockSize, key coordinator.raft.id-block-size, default 1000: how
	// many sequence ids one Raft append reserves.
	IDBlockSize int64 `koanf:"id-block-size"`
	// ChangeLogRetention, key coordinator.raft.change-log.retention,
	// default 100000: how many revisions of exact history the change log
	// keeps; a watch from an older revision fails with ErrCompacted.
	ChangeLogRetention uint64 `koanf:"change-log.retention"`
	// TLS holds the coordinator.raft.tls.* keys.
	TLS RaftTLSConfig `koanf:"tls"`
	// LogDBProfile, key coordinator.raft.logdb.profile, default small: the
	// memory profile of the Raft log store, one of tiny, small, medium,
	// large (see LogDBProfiles).
	LogDBProfile string `koanf:"logdb.profile"`
	// DiskMinFree, key coordinator.raft.disk.min-free, default 64mb: the
	// free space of Dir below which the voter pauses its replica (refuses
	// writes, hands leadership over) until space is freed.
	DiskMinFree Size `koanf:"disk.min-free"`
	// Join, key coordinator.raft.join, default false: start this voter
	// empty and let it join a running cluster whose membership already
	// lists it, instead of bootstrapping a new cluster from Voters (ignored
	// once the voter has Raft state on disk; see docs/raft.md).
	Join bool `koanf:"join"`
	// ClusterID, key coordinator.raft.cluster-id, default 0 (not set): the
	// cluster id (shown by metaplane raft status) of the cluster this voter
	// belongs to. A joining coordinator learns it from the coordinators of
	// coordinator.seed.nodes when it is not set, and refuses to start when
	// it is set and they report another; a voter whose directory holds
	// another cluster's id refuses to start (see docs/raft.md).
	ClusterID uint64 `koanf:"cluster-id"`
}

// RaftTLSConfig holds the coordinator.raft.tls.* keys: mutual TLS between
// voters.
type RaftTLSConfig struct {
	// Enabled, key coordinator.raft.tls.enabled, default false.
	Enabled bool `koanf:"enabled"`
	// CAFile, key coordinator.raft.tls.ca-file: the CA bundle (PEM) that
	// signs every voter's certificate. Required when Enabled.
	CAFile string `koanf:"ca-file"`
	// CertFile, key coordinator.raft.tls.cert-file: this voter's
	// certificate (PEM). Required when Enabled.
	CertFile string `koanf:"cert-file"`
	// KeyFile, key coordinator.raft.tls.key-file: this voter's private key
	// (PEM). Required when Enabled.
	KeyFile string `koanf:"key-file"`
}

// ZooKeeperConfig holds the zookeeper.* keys.
type ZooKeeperConfig struct {
	// Address, key zookeeper.address, default empty: the ensemble's
	// servers, each host[:port] (port 2181 when omitted). Setting it
	// selects the (deprecated) ZooKeeper backend.
	Address []string `koanf:"address"`
	// PathRoot, key zookeeper.path.root, default /fluss: the znode under
	// which everything is stored.
	PathRoot string `koanf:"path.root"`
	// Client holds the zookeeper.client.* keys.
	Client ZooKeeperClientConfig `koanf:"client"`
}

// ZooKeeperClientConfig holds the zookeeper.client.* keys. The defaults are
// those of the original system's configuration options.
type ZooKeeperClientConfig struct {
	// SessionTimeout, key zookeeper.client.session-timeout, default 60s.
	SessionTimeout time.Duration `koanf:"session-timeout"`
	// ConnectionTimeout, key zookeeper.client.connection-timeout, default
	// 15s: how long to wait for a connection before giving up an attempt.
	ConnectionTimeout time.Duration `koanf:"connection-timeout"`
	// RetryWait, key zookeeper.client.retry-wait, default 5s: the pause
	// between connection retries.
	RetryWait time.Duration `koanf:"retry-wait"`
	// MaxRetryAttempts, key zookeeper.client.max-retry-attempts, default
	// 3: connection retries before the client gives up.
	MaxRetryAttempts int `koanf:"max-retry-attempts"`
	// MaxInflightRequests, key zookeeper.client.max-inflight-requests,
	// default 100: unacknowledged requests before the client blocks.
	MaxInflightRequests int `koanf:"max-inflight-requests"`
	// MaxBufferSize, key zookeeper.client.max-buffer-size, default 100mb:
	// the largest packet the client accepts (ZooKeeper's jute.maxbuffer).
	MaxBufferSize Size `koanf:"max-buffer-size"`
}

// MetadataConfig holds the metadata.* keys.
type MetadataConfig struct {
	// Backend holds the metadata.backend.* keys.
	Backend BackendConfig `koanf:"backend"`
}

// BackendConfig holds the metadata.backend.* keys.
type BackendConfig struct {
	// Default, key metadata.backend.default, default raft: the backend
	// used when no backend's selector key is set: raft (a single-voter
	// quorum on loopback), zookeeper (then zookeeper.address is
	// required), none (refuse to start), or a registered plugin's name.
	Default string `koanf:"default"`
	// PluginDir, key metadata.backend.plugin.dir, default empty (the
	// directory of the metaplane binary): where the
	// metaplane-backend-<name> plugin binaries are.
	PluginDir string `koanf:"plugin.dir"`
	// PluginSHA256, key metadata.backend.plugin.sha256, default empty (not
	// checked): the expected SHA-256 (64 hex digits) of the selected
	// plugin binary; a mismatch refuses to start it.
	PluginSHA256 string `koanf:"plugin.sha256"`
}

// The choices of metadata.backend.default besides a backend's name.
const (
	// BackendNone refuses to start when no selector key is set.
	BackendNone = "none"
	// BackendRaft is the Raft backend's name.
	BackendRaft = "raft"
	// BackendZooKeeper is the ZooKeeper backend's name.
	BackendZooKeeper = "zookeeper"
)

// LogDBProfiles lists the accepted values of coordinator.raft.logdb.profile,
// smallest first. The Raft backend maps each to its log store's memory
// budget (docs/raft.md).
var LogDBProfiles = []string{"tiny", "small", "medium", "large"}

// Default returns a new Config holding every key's default. The
// caller owns the result.
func Default() *Config {
	return &Config{
		Coordinator: CoordinatorConfig{
			Raft: RaftConfig{
				Port:                     9124,
				Dir:                      "./data/raft",
				HeartbeatInterval:        500 * time.Millisecond,
				ElectionTimeout:          time.Second,
				FirstElectionTimeout:     300 * time.Millisecond,
				CatchupTimeout:           30 * time.Second,
				LogSegmentSize:           8 * MiB,
				SnapshotTriggerThreshold: 10000,
				IDBlockSize:              1000,
				ChangeLogRetention:       100000,
				LogDBProfile:             "small",
				DiskMinFree:              64 * MiB,
			},
			TabletServerSessionTimeout: 30 * time.Second,
			MetadataStreamMaxWait:      500 * time.Millisecond,
			MetadataStreamMaxSnapshots: 4,
			RequestRetention:           24 * time.Hour,
			MaxRequestRecords:          100000,
			Gossip:                     GossipConfig{Port: 9125},
			GCHeadroom:                 64 * MiB,
		},
		ZooKeeper: ZooKeeperConfig{
			PathRoot: "/fluss",
			Client: ZooKeeperClientConfig{
				SessionTimeout:      60 * time.Second,
				ConnectionTimeout:   15 * time.Second,
				RetryWait:           5 * time.Second,
				MaxRetryAttempts:    3,
				MaxInflightRequests: 100,
				MaxBufferSize:       100 * MiB,
			},
		},
		Metadata: MetadataConfig{Backend: BackendConfig{Default: BackendRaft}},
		Security: SecurityConfig{TLS: ListenerTLSConfig{ClientAuth: "none"},
			SASL: SASLConfig{EnabledMechanisms: []string{MechanismPlain}}},
		BindListeners:              []string{"CLIENT://127.0.0.1:9123"},
		MetricsAddress:             "127.0.0.1:9249",
		TabletServerID:             -1,
		TabletServerMetadataStream: MetadataStreamFromAny,
		DataDir:                    "./data",
		InternalListenerName:       "FLUSS",
		Log:                        LogConfig{Level: "info", Format: "text"},
		MaxBucketNum:               20000,
		MaxPartitionNum:            1000,
	}
}
