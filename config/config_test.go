package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// problemsOf returns the problems of a *Error, failing t otherwise.
func problemsOf(t *testing.T, err error) []Problem {
	t.Helper()
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("got error %v (%T), want a *Error", err, err)
	}
	return ce.Problems
}

// wantProblem fails t unless err holds a problem with key whose message
// contains frag.
func wantProblem(t *testing.T, err error, key, frag string) {
	t.Helper()
	for _, p := range problemsOf(t, err) {
		if p.Key == key && strings.Contains(p.Message, frag) {
			return
		}
	}
	t.Fatalf("no problem %q containing %q in:\n%v", key, frag, err)
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "metaplane.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultConfigIsValidAndSelectsRaft(t *testing.T) {
	cfg, err := Load(LoadOptions{})
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if !reflect.DeepEqual(withoutSelection(cfg), Default()) {
		t.Errorf("Load with no source differs from Default:\n got %+v\nwant %+v", cfg, Default())
	}
	if cfg.Selected.Backend != "raft" || cfg.Selected.SelectedBy != "metadata.backend.default=raft" {
		t.Errorf("selection %+v, want raft by metadata.backend.default=raft", cfg.Selected)
	}
	r := cfg.Coordinator.Raft
	checks := []struct {
		key       string
		got, want any
	}{
		{"coordinator.raft.port", r.Port, 9124},
		{"coordinator.raft.dir", r.Dir, "./data/raft"},
		{"coordinator.raft.heartbeat.interval", r.HeartbeatInterval, 500 * time.Millisecond},
		{"coordinator.raft.election.timeout", r.ElectionTimeout, time.Second},
		{"coordinator.raft.first-election.timeout", r.FirstElectionTimeout, 300 * time.Millisecond},
		{"coordinator.raft.catchup.timeout", r.CatchupTimeout, 30 * time.Second},
		{"coordinator.raft.log.segment-size", r.LogSegmentSize, 8 * MiB},
		{"coordinator.raft.snapshot.trigger.threshold", r.SnapshotTriggerThreshold, uint64(10000)},
		{"coordinator.raft.id-block-size", r.IDBlockSize, int64(1000)},
		{"coordinator.raft.change-log.retention", r.ChangeLogRetention, uint64(100000)},
		{"coordinator.raft.tls.enabled", r.TLS.Enabled, false},
		{"coordinator.raft.logdb.profile", r.LogDBProfile, "small"},
		{"coordinator.tablet-server.session-timeout", cfg.Coordinator.TabletServerSessionTimeout, 30 * time.Second},
		{"coordinator.metadata-stream.max-wait", cfg.Coordinator.MetadataStreamMaxWait, 500 * time.Millisecond},
		{"coordinator.metadata-stream.max-concurrent-snapshots", cfg.Coordinator.MetadataStreamMaxSnapshots, 4},
		{"coordinator.gossip.enabled", cfg.Coordinator.Gossip.Enabled, false},
		{"coordinator.gossip.port", cfg.Coordinator.Gossip.Port, 9125},
		{"zookeeper.path.root", cfg.ZooKeeper.PathRoot, "/fluss"},
		{"zookeeper.client.session-timeout", cfg.ZooKeeper.Client.SessionTimeout, 60 * time.Second},
		{"zookeeper.client.connection-timeout", cfg.ZooKeeper.Client.ConnectionTimeout, 15 * time.Second},
		{"zookeeper.client.retry-wait", cfg.ZooKeeper.Client.RetryWait, 5 * time.Second},
		{"zookeeper.client.max-retry-attempts", cfg.ZooKeeper.Client.MaxRetryAttempts, 3},
		{"zookeeper.client.max-inflight-requests", cfg.ZooKeeper.Client.MaxInflightRequests, 100},
		{"zookeeper.client.max-buffer-size", cfg.ZooKeeper.Client.MaxBufferSize, 100 * MiB},
		{"metadata.backend.default", cfg.Metadata.Backend.Default, "raft"},
		{"bind.listeners", cfg.BindListeners, []string{"CLIENT://127.0.0.1:9123"}},
		{"metrics.address", cfg.MetricsAddress, "127.0.0.1:9249"},
		{"tablet-server.id", cfg.TabletServerID, -1},
		{"data.dir", cfg.DataDir, "./data"},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s default = %v, want %v", c.key, c.got, c.want)
		}
	}
	if v := cfg.RaftVoters(); len(v) != 1 || v[0].String() != "1@127.0.0.1:9124" {
		t.Errorf("default voters %v, want a single voter 1@127.0.0.1:9124", v)
	}
}

func withoutSelection(c *Config) *Config {
	cp := *c
	cp.Selected = Selection{}
	cp.Present = nil
	return &cp
}

func TestFlatNestedAndMixedFilesAgree(t *testing.T) {
	var configs []*Config
	for _, name := range []string{"flat.yaml", "nested.yaml", "mixed.yaml"} {
		cfg, err := Load(LoadOptions{File: filepath.Join("testdata", "config", name)})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		configs = append(configs, cfg)
	}
	c := configs[0]
	if got := c.Coordinator.Raft.Voters; !reflect.DeepEqual(got, []string{"1@coord-1:9124", "2@coord-2:9124", "3@coord-3:9124"}) {
		t.Errorf("voters %q", got)
	}
	if got := c.Coordinator.SeedNodes; len(got) != 3 || got[1] != "coord-2:9123" {
		t.Errorf("seed nodes %q (comma-separated string, trimmed)", got)
	}
	if c.Coordinator.Raft.NodeID != 2 || c.Coordinator.Raft.HeartbeatInterval != 100*time.Millisecond ||
		c.Coordinator.Raft.ElectionTimeout != 2*time.Second || c.Coordinator.Raft.LogSegmentSize != 16*MiB ||
		c.ZooKeeper.Client.MaxBufferSize != MiB {
		t.Errorf("flat file decoded wrong: %+v", c)
	}
	if c.Selected.Backend != "raft" || c.Selected.SelectedBy != KeySeedNodes {
		t.Errorf("selection %+v, want raft by coordinator.seed.nodes", c.Selected)
	}
	for i, other := range configs[1:] {
		if !reflect.DeepEqual(withoutSelection(c), withoutSelection(other)) {
			t.Errorf("file %d differs from the flat file:\n got %+v\nwant %+v", i+1, other, c)
		}
	}
}

func TestDuplicateKeyInFileIsAProblem(t *testing.T) {
	_, err := Load(LoadOptions{File: filepath.Join("testdata", "config", "dup.yaml")})
	wantProblem(t, err, "coordinator.raft.port", "set twice")
}

func TestPrecedenceFileEnvOverrides(t *testing.T) {
	file := writeFile(t, "coordinator.raft.port: 9200\ncoordinator.raft.dir: /from/file\ndata.dir: /file/data\n")
	env := []string{
		"PATH=/usr/bin",
		"METAPLANE_COORDINATOR_RAFT_PORT=9300",
		"METAPLANE_COORDINATOR_RAFT_DIR=/from/env",
		"METAPLANE_COORDINATOR_RAFT_FIRST__ELECTION_TIMEOUT=250ms",
		"METAPLANE_BIN_DIR=/ignored", // reserved: not configuration
		"METAPLANE_SOAK=1",
	}
	cfg, err := Load(LoadOptions{File: file, Env: env, Overrides: []string{
		"coordinator.raft.port=9400", "coordinator.raft.port=9500", "coordinator.raft.logdb.profile=tiny",
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Coordinator.Raft
	if r.Port != 9500 {
		t.Errorf("port %d, want 9500 (the last -D wins)", r.Port)
	}
	if r.Dir != "/from/env" {
		t.Errorf("dir %q, want /from/env (environment over file)", r.Dir)
	}
	if cfg.DataDir != "/file/data" {
		t.Errorf("data.dir %q, want /file/data", cfg.DataDir)
	}
	if r.FirstElectionTimeout != 250*time.Millisecond || r.LogDBProfile != "tiny" {
		t.Errorf("first-election %v, profile %q", r.FirstElectionTimeout, r.LogDBProfile)
	}
}

func TestEnvMappingIsReversible(t *testing.T) {
	for _, key := range Keys() {
		name := EnvName(key)
		back, ok := KeyForEnv(name)
		if !ok || back != key {
			t.Errorf("%s -> %s -> %q (%v), want the key back", key, name, back, ok)
		}
	}
	if got := EnvName("coordinator.raft.first-election.timeout"); got != "METAPLANE_COORDINATOR_RAFT_FIRST__ELECTION_TIMEOUT" {
		t.Errorf("EnvName = %s", got)
	}
	for _, bad := range []string{"METAPLANE_", "METAPLANE__X", "METAPLANE_A__", "METAPLANE_a", "OTHER_X", "METAPLANE_A__B__"} {
		if k, ok := KeyForEnv(bad); ok {
			t.Errorf("KeyForEnv(%q) = %q, want refused", bad, k)
		}
	}
}

func TestUnknownEnvVariableIsAProblem(t *testing.T) {
	_, err := Load(LoadOptions{Env: []string{"METAPLANE_COORDINATOR_RAFT_PROT=1", "METAPLANE_X__=2"}})
	wantProblem(t, err, "METAPLANE_COORDINATOR_RAFT_PROT", "unknown key coordinator.raft.prot (did you mean coordinator.raft.port?)")
	wantProblem(t, err, "METAPLANE_X__", "does not map")
}

func TestUnknownKeysAndBadValuesAreAllReported(t *testing.T) {
	file := writeFile(t, `
coordinator.raft.prot: 9124
coordinator.raft.election.timeout: 1x
coordinator.raft.heartbeat.interval: 500
coordinator.raft.log.segment-size: 8 parsecs
coordinator.raft.port: nine
coordinator.raft.tls.enabled: yes please
coordinator.raft.snapshot.trigger.threshold: -5
coordinator.raft: 3
nonsense: true
`)
	_, err := Load(LoadOptions{File: file, Overrides: []string{"novalue", "zookeeper.path.root=fluss"}})
	ps := problemsOf(t, err)
	want := map[string]string{
		"coordinator.raft.prot":                       "unknown key (did you mean coordinator.raft.port?)",
		"coordinator.raft.election.timeout":           `invalid duration "1x"`,
		"coordinator.raft.heartbeat.interval":         "needs a unit",
		"coordinator.raft.log.segment-size":           `unknown unit "parsecs"`,
		"coordinator.raft.port":                       `invalid integer "nine"`,
		"coordinator.raft.tls.enabled":                "want true or false",
		"coordinator.raft.snapshot.trigger.threshold": "must not be negative",
		"coordinator.raft":                            "is a section, not a key",
		"nonsense":                                    "unknown key",
		"novalue":                                     "want key=value",
		"zookeeper.path.root":                         "not a valid absolute znode path",
	}
	for key, frag := range want {
		wantProblem(t, err, key, frag)
	}
	if len(ps) != len(want) {
		t.Errorf("got %d problems, want %d:\n%v", len(ps), len(want), err)
	}
	if !reflect.DeepEqual(ps, SortProblems(ps)) {
		t.Errorf("problems not sorted: %v", ps)
	}
}

func TestPresentButEmptySelectorKey(t *testing.T) {
	for _, body := range []string{"zookeeper.address:\n", "zookeeper.address: \"\"\n", "zookeeper:\n  address: []\n", "zookeeper.address: \" , \"\n"} {
		_, err := Load(LoadOptions{File: writeFile(t, body)})
		wantProblem(t, err, "zookeeper.address", "set but empty")
	}
	_, err := Load(LoadOptions{Overrides: []string{"coordinator.seed.nodes="}})
	wantProblem(t, err, "coordinator.seed.nodes", "set but empty")
}

func TestSelectionThroughLoadConfig(t *testing.T) {
	cfg, err := Load(LoadOptions{Overrides: []string{"zookeeper.address=zk-1:2181,zk-2"}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Selected.Backend != "zookeeper" || len(cfg.Selected.Warnings) != 1 {
		t.Errorf("selection %+v, want zookeeper with a deprecation warning", cfg.Selected)
	}
	if !reflect.DeepEqual(cfg.ZooKeeper.Address, []string{"zk-1:2181", "zk-2"}) {
		t.Errorf("address %q", cfg.ZooKeeper.Address)
	}
	_, err = Load(LoadOptions{Overrides: []string{"zookeeper.address=zk:2181", "coordinator.seed.nodes=c:9123"}})
	wantProblem(t, err, "coordinator.seed.nodes", "exclusive")
	_, err = Load(LoadOptions{Overrides: []string{"zookeeper.address=zk:2181", "zookeeper.path.root=/"}})
	wantProblem(t, err, "zookeeper.path.root", "must not be /")
	_, err = Load(LoadOptions{Overrides: []string{"zookeeper.address=zk:2181/fluss"}})
	wantProblem(t, err, "zookeeper.address", `address "zk:2181/fluss": a chroot suffix (/fluss) is refused: set zookeeper.path.root: /fluss and zookeeper.address: zk:2181`)
	_, err = Load(LoadOptions{Overrides: []string{"metadata.backend.default=none"}})
	wantProblem(t, err, "metadata.backend.default", "none, and no backend is configured")
	_, err = Load(LoadOptions{Overrides: []string{"metadata.backend.default=zookeeper"}})
	wantProblem(t, err, "zookeeper.address", "required")
}

func TestThirdPartyBackendKeys(t *testing.T) {
	file := writeFile(t, "etcd:\n  endpoints: [e1:2379, e2:2379]\n  dial-timeout: 5s\n")
	opts := LoadOptions{File: file, Env: []string{"METAPLANE_ETCD_USERNAME=root"}, ExtraBackends: []core.BackendDescriptor{etcdDescriptor}}
	cfg, err := Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"etcd.endpoints": "e1:2379,e2:2379", "etcd.dial-timeout": "5s", "etcd.username": "root"}
	if !reflect.DeepEqual(cfg.Extra, want) {
		t.Errorf("Extra %v, want %v", cfg.Extra, want)
	}
	if cfg.Selected.Backend != "etcd" || cfg.Selected.SelectedBy != "etcd.endpoints" {
		t.Errorf("selection %+v", cfg.Selected)
	}
	// Without the descriptor the keys are unknown, and the message says
	// where plugins are discovered.
	_, err = Load(LoadOptions{File: file})
	wantProblem(t, err, "etcd.endpoints", "unknown key; if it belongs to a third-party backend, no plugin binary metaplane-backend-<name> in the plugin directory (metadata.backend.plugin.dir; default: the directory of the metaplane executable)")
	_, err = Load(LoadOptions{File: file, Overrides: []string{"metadata.backend.plugin.dir=/opt/mp/plugins"}})
	wantProblem(t, err, "etcd.endpoints", "in the plugin directory /opt/mp/plugins (metadata.backend.plugin.dir)")
	_, err = Load(LoadOptions{Env: []string{"METAPLANE_ETCD_ENDPOINTS=e1:2379"}})
	wantProblem(t, err, "METAPLANE_ETCD_ENDPOINTS", "unknown key etcd.endpoints; if it belongs to a third-party backend")
	// A key under a built-in section gets no plugin hint.
	_, err = Load(LoadOptions{Overrides: []string{"coordinator.raft.bogus=1"}})
	if p := problemsOf(t, err); len(p) != 1 || strings.Contains(p[0].Message, "plugin") {
		t.Errorf("coordinator.raft.bogus: got %v, want one problem without a plugin hint", p)
	}
	// With seed nodes too: refused.
	opts.Overrides = []string{"coordinator.seed.nodes=c1:9123"}
	_, err = Load(opts)
	wantProblem(t, err, "coordinator.seed.nodes", "etcd.endpoints (selects etcd)")
	// A plugin may not claim a built-in section.
	_, err = Load(LoadOptions{ExtraBackends: []core.BackendDescriptor{{Name: "bad", SelectorKey: "coordinator.bad.endpoints"}}})
	if err == nil || errors.As(err, new(*Error)) {
		t.Errorf("got %v, want a plain error refusing the descriptor", err)
	}
}

func TestFlattenRoundTrip(t *testing.T) {
	cfg, err := Load(LoadOptions{
		File:          filepath.Join("testdata", "config", "flat.yaml"),
		Overrides:     []string{"etcd.x=1", "advertised.listeners=CLIENT://10.0.0.1:9123", "zookeeper.client.session-timeout=90s", "coordinator.raft.tls.ca-file=/nonexistent"},
		ExtraBackends: []core.BackendDescriptor{{Name: "etcd", SelectorKey: "etcd.endpoints"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	flat := cfg.Flatten()
	for key, want := range map[string]string{
		"coordinator.raft.heartbeat.interval": "100ms",
		"coordinator.raft.log.segment-size":   "16mb",
		"coordinator.raft.voters":             "1@coord-1:9124,2@coord-2:9124,3@coord-3:9124",
		"zookeeper.client.session-timeout":    "90s",
		"zookeeper.client.max-buffer-size":    "1mb",
		"coordinator.gossip.enabled":          "false",
		"etcd.x":                              "1",
	} {
		if flat[key] != want {
			t.Errorf("Flatten()[%s] = %q, want %q", key, flat[key], want)
		}
	}
	if _, ok := flat["zookeeper.address"]; ok {
		t.Errorf("Flatten includes the empty zookeeper.address")
	}
	back, err := FromFlat(flat)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, withoutSelection(cfg)) {
		t.Errorf("round trip differs:\n got %+v\nwant %+v", back, cfg)
	}
	flat["coordinator.raft.bogus"] = "1"
	_, err = FromFlat(flat)
	wantProblem(t, err, "coordinator.raft.bogus", "unknown key")
}

func TestSizeParsing(t *testing.T) {
	good := map[string]Size{"8mb": 8 * MiB, "512kb": 512 * KiB, "1gb": GiB, "100": 100, "1024m": GiB, "4k": 4 * KiB, "1 MB": MiB, "0": 0, "2tb": 2 * TiB, "7b": 7}
	for s, want := range good {
		got, err := ParseSize(s)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
		if back, _ := ParseSize(got.String()); back != got {
			t.Errorf("%d.String() = %q does not parse back", got, got.String())
		}
	}
	for _, s := range []string{"", "mb", "-1mb", "1.5mb", "8 parsecs", "99999999999tb"} {
		if _, err := ParseSize(s); err == nil {
			t.Errorf("ParseSize(%q) succeeded, want an error", s)
		}
	}
}

func TestVoterValidation(t *testing.T) {
	tests := []struct {
		name      string
		overrides []string
		observer  bool
		key, frag string // "" key: valid
	}{
		{"three voters", []string{"coordinator.raft.voters=1@a:9124,2@b:9124,3@c:9124", "coordinator.raft.node.id=3"}, false, "", ""},
		{"missing id", []string{"coordinator.raft.voters=a:9124"}, false, "coordinator.raft.voters", "want id@host:port"},
		{"zero id", []string{"coordinator.raft.voters=0@a:9124", "coordinator.raft.node.id=1"}, false, "coordinator.raft.voters", "not a positive integer"},
		{"bad port", []string{"coordinator.raft.voters=1@a:70000", "coordinator.raft.node.id=1"}, false, "coordinator.raft.voters", "not in 1..65535"},
		{"duplicate id", []string{"coordinator.raft.voters=1@a:9124,1@b:9124", "coordinator.raft.node.id=1"}, false, "coordinator.raft.voters", "id 1 is given twice"},
		{"duplicate address", []string{"coordinator.raft.voters=1@a:9124,2@a:9124", "coordinator.raft.node.id=1"}, false, "coordinator.raft.voters", "address a:9124 is given twice"},
		{"node id missing", []string{"coordinator.raft.voters=1@a:9124,2@b:9124"}, false, "coordinator.raft.node.id", "required when coordinator.raft.voters is set"},
		{"node id not a voter", []string{"coordinator.raft.voters=1@a:9124,2@b:9124", "coordinator.raft.node.id=7"}, false, "coordinator.raft.node.id", "7 is not among the voters' ids (1, 2)"},
		{"port disagrees", []string{"coordinator.raft.voters=1@a:9200", "coordinator.raft.node.id=1"}, false, "coordinator.raft.port", "differs"},
		{"several seeds need voters", []string{"coordinator.seed.nodes=a:9123,b:9123"}, false, "coordinator.raft.voters", "required when coordinator.seed.nodes"},
		{"observer needs no voters", []string{"coordinator.seed.nodes=a:9123,b:9123"}, true, "", ""},
		{"one seed, single voter", []string{"coordinator.seed.nodes=a:9123"}, false, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(LoadOptions{Overrides: tt.overrides, Observer: tt.observer})
			if tt.key == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			wantProblem(t, err, tt.key, tt.frag)
		})
	}
}

func TestValueRules(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		set       string
		key, frag string
	}{
		{"coordinator.raft.tls.enabled=true", "coordinator.raft.tls.cert-file", "required when coordinator.raft.tls.enabled"},
		{"coordinator.raft.tls.enabled=true", "coordinator.raft.tls.ca-file", "required"},
		{"coordinator.raft.logdb.profile=huge", "coordinator.raft.logdb.profile", `unknown profile "huge"`},
		{"coordinator.raft.port=0", "coordinator.raft.port", "not a port"},
		{"coordinator.raft.dir=", "coordinator.raft.dir", "must not be empty"},
		{"coordinator.raft.id-block-size=0", "coordinator.raft.id-block-size", "at least 1"},
		{"coordinator.raft.catchup.timeout=0s", "coordinator.raft.catchup.timeout", "must be positive"},
		{"coordinator.raft.first-election.timeout=10ms", "coordinator.raft.first-election.timeout", "below the Raft tick"},
		{"coordinator.seed.nodes=a", "coordinator.seed.nodes", "want host:port"},
		{"coordinator.gossip.enabled=true,", "coordinator.gossip.enabled", "want true or false"},
		{"metadata.backend.plugin.sha256=abc", "metadata.backend.plugin.sha256", "64 hexadecimal digits"},
		{"bind.listeners=127.0.0.1:9123", "bind.listeners", "want NAME://host:port"},
		{"advertised.listeners=INTERNAL://h:1", "advertised.listeners", "not one of bind.listeners' names"},
		{"metrics.address=nowhere", "metrics.address", "want host:port"},
		{"tablet-server.id=-2", "tablet-server.id", "at least 0"},
		{"zookeeper.client.max-inflight-requests=0", "zookeeper.client.max-inflight-requests", "at least 1"},
		{"coordinator.metadata-stream.max-concurrent-snapshots=0", "coordinator.metadata-stream.max-concurrent-snapshots", "at least 1"},
		{"coordinator.raft.election.timeout=200ms", "coordinator.raft.election.timeout", "below the minimum of 300ms"},
		{"coordinator.raft.heartbeat.interval=2s", "coordinator.raft.heartbeat.interval", "is not below coordinator.raft.election.timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.set, func(t *testing.T) {
			_, err := Load(LoadOptions{Overrides: []string{tt.set, "coordinator.raft.tls.key-file=" + ca}})
			wantProblem(t, err, tt.key, tt.frag)
		})
	}
	tca := testutil.NewCA(t, "raft")
	voter := tca.Issue(t, "voter", testutil.CertOptions{CommonName: "voter", Server: true, Client: true})
	if _, err := Load(LoadOptions{Overrides: []string{"coordinator.raft.tls.enabled=true",
		"coordinator.raft.tls.ca-file=" + tca.CertFile, "coordinator.raft.tls.cert-file=" + voter.CertFile, "coordinator.raft.tls.key-file=" + voter.KeyFile}}); err != nil {
		t.Errorf("TLS with good files: %v", err)
	}
	_, err := Load(LoadOptions{Overrides: []string{"coordinator.raft.tls.enabled=true",
		"coordinator.raft.tls.ca-file=" + filepath.Join(dir, "missing.pem"), "coordinator.raft.tls.cert-file=" + ca, "coordinator.raft.tls.key-file=" + dir}})
	wantProblem(t, err, "coordinator.raft.tls.ca-file", "no such file")
	wantProblem(t, err, "coordinator.raft.tls.key-file", "is a directory")
}

func TestValidateNeverEdits(t *testing.T) {
	cfg := Default()
	cfg.Coordinator.Raft.HeartbeatInterval = 2 * time.Second
	cfg.Coordinator.Raft.Voters = []string{" 1@a:9124"}
	before := *cfg
	before.Coordinator.Raft.Voters = append([]string(nil), cfg.Coordinator.Raft.Voters...)
	if err := cfg.Validate(); err == nil {
		t.Fatal("Validate accepted a heartbeat above the election timeout")
	}
	if !reflect.DeepEqual(*cfg, before) {
		t.Errorf("Validate changed the config")
	}
}

func TestMissingFileIsAProblem(t *testing.T) {
	_, err := Load(LoadOptions{File: filepath.Join(t.TempDir(), "absent.yaml")})
	wantProblem(t, err, "", "absent.yaml")
}

// TestDocsListEveryKey keeps docs/configuration.md in step with the key
// registry: every key the loader knows has a row in a key/default table
// whose default cell names the key's default, and every key the tables
// name is one the loader knows.
func TestDocsListEveryKey(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "configuration.md"))
	if err != nil {
		t.Fatalf("reading the configuration reference: %v", err)
	}
	rows := docKeyRows(string(b))
	defaults := Default().Flatten()
	for _, key := range Keys() {
		cell, ok := rows[key]
		if !ok {
			t.Errorf("docs/configuration.md has no key/default row for %s", key)
			continue
		}
		want, set := defaults[key]
		if unset, ok := unsetSentinel[key]; ok && want == unset {
			set = false
		}
		if !set {
			if docValues(cell) != nil && !strings.HasPrefix(cell, "(none") {
				t.Errorf("docs/configuration.md gives %s the default %q; the loader has none", key, cell)
			}
			continue
		}
		if !docNamesDefault(key, cell, want) {
			t.Errorf("docs/configuration.md gives %s the default %q; the loader's is %q", key, cell, want)
		}
	}
	for key := range rows {
		if !isKnownKey(key) {
			t.Errorf("docs/configuration.md documents %s, which the loader does not know", key)
		}
	}
}

// unsetSentinel are the keys whose default is a number that means "not
// set" (the docs say "(none)" or "not set" for them).
var unsetSentinel = map[string]string{
	"coordinator.raft.node.id":    "0",
	"coordinator.raft.cluster-id": "0",
	"tablet-server.id":            "-1",
}

// docKeyRows returns, for every row of a table of docs/configuration.md
// whose header starts "| key | default |", the first cell's key and the
// second cell's text.
func docKeyRows(doc string) map[string]string {
	rows := map[string]string{}
	inTable := false
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "|") {
			inTable = false
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) >= 2 && cells[0] == "key" && cells[1] == "default" {
			inTable = true
			continue
		}
		if !inTable || len(cells) < 2 || strings.HasPrefix(cells[0], "---") {
			continue
		}
		if vs := docValues(cells[0]); len(vs) == 1 && cells[0] == "`"+vs[0]+"`" {
			rows[vs[0]] = cells[1]
		}
	}
	return rows
}

// docValues returns the backquoted spans of a table cell.
func docValues(cell string) []string {
	var out []string
	for {
		_, rest, ok := strings.Cut(cell, "`")
		if !ok {
			return out
		}
		v, after, ok := strings.Cut(rest, "`")
		if !ok {
			return out
		}
		out = append(out, v)
		cell = after
	}
}

// docNamesDefault reports whether one of the backquoted values of cell
// decodes, as key's value, to the default want (so "60s" names "1m").
func docNamesDefault(key, cell, want string) bool {
	for _, v := range docValues(cell) {
		if v == want {
			return true
		}
		cfg, err := FromFlat(map[string]string{key: v})
		if err == nil && cfg.Flatten()[key] == want {
			return true
		}
	}
	return false
}

func TestReservedEnvNamesNoKey(t *testing.T) {
	for _, name := range []string{"METAPLANE_CONFIG", "METAPLANE_BIN_DIR", "METAPLANE_SOAK", "METAPLANE_BACKEND_PLUGIN",
		"METAPLANE_PLUGIN_LOG_LEVEL", "METAPLANE_JAVA", "METAPLANE_ZK_CLASSPATH", "METAPLANE_TEST_X", "METAPLANE_ADMIN_TLS_CA"} {
		if !IsReservedEnv(name) {
			t.Errorf("%s is not reserved", name)
		}
	}
	if _, err := Load(LoadOptions{Env: []string{"METAPLANE_BACKEND_PLUGIN=cookie", "METAPLANE_ZK_CLASSPATH=/x", "METAPLANE_JAVA=/usr/bin/java"}}); err != nil {
		t.Errorf("reserved variables refused: %v", err)
	}
	for _, key := range Keys() {
		if IsReservedEnv(EnvName(key)) {
			t.Errorf("key %s lies under a reserved environment prefix", key)
		}
	}
}

// TestCheckFilesIsASeparateStep: Validate accepts TLS file names without
// touching the filesystem; CheckFiles reports the garbage CA, the missing
// certificate and the key-file directory, naming their keys.
func TestCheckFilesIsASeparateStep(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Default()
	cfg.Coordinator.Raft.TLS.Enabled = true
	cfg.Coordinator.Raft.TLS.CAFile = ca
	cfg.Coordinator.Raft.TLS.CertFile = filepath.Join(dir, "missing.pem")
	cfg.Coordinator.Raft.TLS.KeyFile = dir
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v, want no problem (it does no file I/O)", err)
	}
	err := cfg.CheckFiles()
	var ce *Error
	if !errors.As(err, &ce) || len(ce.Problems) != 3 {
		t.Fatalf("CheckFiles: %v, want three problems", err)
	}
	ps := SortProblems(ce.Problems)
	if ps[0].Key != "coordinator.raft.tls.ca-file" || !strings.Contains(ps[0].Message, "holds no PEM CA certificate") ||
		ps[1].Key != "coordinator.raft.tls.cert-file" || ps[2].Key != "coordinator.raft.tls.key-file" ||
		!strings.Contains(ps[2].Message, "is a directory") {
		t.Errorf("problems %v, want the garbage CA, the missing cert file and the key-file directory", ps)
	}
}

// TestZooKeeperFailover: the failover note gives the requested session
// timeout and, when a default server would clamp it, what it grants.
func TestZooKeeperFailover(t *testing.T) {
	for _, tt := range []struct {
		timeout time.Duration
		want    string
		clamped bool
	}{
		{60 * time.Second, "session-timeout=1m, which a server with the default tickTime of 2s grants as 40s", true},
		{time.Second, "session-timeout=1s, which a server with the default tickTime of 2s grants as 4s", true},
		{10 * time.Second, "session-timeout=10s;", false},
	} {
		cfg := Default()
		cfg.ZooKeeper.Client.SessionTimeout = tt.timeout
		got := cfg.ZooKeeperFailover()
		if !strings.Contains(got, tt.want) || strings.Contains(got, "grants as") != tt.clamped {
			t.Errorf("%v: %q, want it to contain %q", tt.timeout, got, tt.want)
		}
	}
}

// TestClusterIDTakesTheWholeRange: coordinator.raft.cluster-id above 2^63
// (half of all random ids) loads, round-trips through the plugin settings
// and parses back.
func TestClusterIDTakesTheWholeRange(t *testing.T) {
	const id = uint64(17820187087881251998)
	cfg, err := Load(LoadOptions{Overrides: []string{"coordinator.raft.cluster-id=17820187087881251998"}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Coordinator.Raft.ClusterID != id {
		t.Fatalf("ClusterID = %d, want %d", cfg.Coordinator.Raft.ClusterID, id)
	}
	back, err := FromFlat(cfg.PluginSettings())
	if err != nil || back.Coordinator.Raft.ClusterID != id {
		t.Fatalf("round trip: %v, %d", err, back.Coordinator.Raft.ClusterID)
	}
	if _, err := Load(LoadOptions{Overrides: []string{"coordinator.raft.cluster-id=-3"}}); err == nil || !strings.Contains(err.Error(), "must not be negative") {
		t.Errorf("a negative cluster id: %v", err)
	}
}

// FromFlat builds a Config from a map of keys to string values, as
// (*Config).Flatten produces, on top of the defaults, and validates it: the
// tests' check that Flatten and PluginSettings lose nothing. Unknown keys
// under a built-in section are problems; other unknown keys (third-party
// backends' settings, which the host has accepted) go to Extra. It does not
// select a backend: the plugin is the selection. Errors: a *Error.
// The caller owns the result; m is not retained.
func FromFlat(m map[string]string) (*Config, error) {
	var probs Problems
	merged := make(map[string]any, len(m))
	for k, v := range m {
		merged[k] = v
	}
	cfg, _ := decodeFlat(merged, extraSet{any: true}, &probs)
	cfg.validate(&probs, false)
	if len(probs) > 0 {
		return nil, probs.Err()
	}
	return cfg, nil
}
