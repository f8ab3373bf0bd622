package coordinator

import (
	"context"
	"runtime"
	"runtime/debug"
	"strconv"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
)

// Metrics are a coordinator's Prometheus metrics. The Raft gauges carry
// the names operators of the original know (raftRole, raftTerm, ...).
type Metrics struct {
	s *Server

	leader        prometheus.Gauge
	epoch         prometheus.Gauge
	observedEpoch prometheus.Gauge
	calls         *prometheus.HistogramVec
	tablets       prometheus.GaugeFunc
	imageRevision prometheus.GaugeFunc
	// warm is 1 while the coordinator's image is loaded and its bucket
	// states current (Server.Warm): a standby that would take over
	// without reading the tree.
	warm prometheus.GaugeFunc
	// leaderChanges counts the changes of leader this coordinator has
	// observed (a new leader id or epoch).
	leaderChanges prometheus.Counter
	buildInfo     prometheus.Gauge
	// leaderAndIsrWrites counts the LeaderAndIsr records the controller
	// wrote (elections, ISR changes).
	leaderAndIsrWrites prometheus.Counter
	offlineBuckets     prometheus.GaugeFunc
	// imageCatchUp is how long a new leader took from its election to
	// serving: its warm image brought up to the leadership's start.
	imageCatchUp prometheus.Histogram
	// grpc are the gRPC server's request metrics (go-grpc-middleware's
	// Prometheus provider, conventional names grpc_server_*).
	grpc *grpcprom.ServerMetrics
}

func newMetrics(s *Server, reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		s: s,
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "metaplane_coordinator_leader",
			Help: "1 while this coordinator serves as leader, else 0."}),
		epoch: prometheus.NewGauge(prometheus.GaugeOpts{Name: "metaplane_coordinator_epoch",
			Help: "The epoch of this coordinator's leadership, -1 when not leading."}),
		observedEpoch: prometheus.NewGauge(prometheus.GaugeOpts{Name: "metaplane_coordinator_observed_leader_epoch",
			Help: "The epoch of the leader this coordinator last observed."}),
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "metaplane_backend_call_seconds",
			Help:    "Latency of calls to the metadata backend (through its plugin), by method and outcome.",
			Buckets: []float64{.00002, .00005, .0001, .0002, .0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5}},
			[]string{"method", "outcome"}),
	}
	m.epoch.Set(-1)
	m.grpc = grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
		grpcprom.WithHistogramBuckets([]float64{.0001, .0005, .001, .005, .01, .05, .1, .5, 1, 5, 30})))
	m.leaderAndIsrWrites = prometheus.NewCounter(prometheus.CounterOpts{Name: "metaplane_bucket_leader_and_isr_writes_total",
		Help: "LeaderAndIsr records this coordinator wrote as leader (elections after tablet servers went or came, AdjustIsr, controlled shutdowns, elect-leaders)."})
	m.offlineBuckets = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "metaplane_buckets_offline",
		Help: "Buckets without a leader (leader -1) as the leader's last controller round saw them (0 on a standby)."},
		func() float64 {
			if l := s.leader.Load(); l != nil {
				return float64(l.ctl.offlineCount())
			}
			return 0
		})
	m.imageCatchUp = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "metaplane_coordinator_catch_up_seconds",
		Help:    "Time from this coordinator's election to its serving as leader: its metadata image, kept current while it was a standby, brought up to the leadership's start.",
		Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}})
	m.leaderChanges = prometheus.NewCounter(prometheus.CounterOpts{Name: "metaplane_coordinator_leader_changes_total",
		Help: "Changes of leader (a new leader id or epoch) this coordinator has observed since it started."})
	version, commit, goversion := buildInfo(debug.ReadBuildInfo)
	m.buildInfo = prometheus.NewGauge(prometheus.GaugeOpts{Name: "metaplane_build_info",
		Help:        "Always 1; the labels say which build runs: the module version, the VCS commit (empty when not stamped), the Go toolchain.",
		ConstLabels: prometheus.Labels{"version": version, "commit": commit, "goversion": goversion}})
	m.buildInfo.Set(1)
	m.tablets = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "metaplane_tablet_servers_registered",
		Help: "Tablet servers registered under /tabletservers/ids, as the leader's image holds them (0 on a standby)."},
		func() float64 {
			if l := s.leader.Load(); l != nil {
				return float64(l.img.CountChildren(catalog.TabletServerIDsPath))
			}
			return 0
		})
	m.imageRevision = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "metaplane_image_revision",
		Help: "The revision this coordinator's metadata image has applied: the leader's, or a standby's warm image (0 before one is loaded)."},
		func() float64 {
			if img := s.warmImage.Load(); img != nil {
				return float64(img.Revision())
			}
			return 0
		})
	m.warm = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "metaplane_coordinator_warm",
		Help: "1 while this coordinator's metadata image is loaded and its bucket states are current with it (a standby that would take over without reading the tree), else 0."},
		func() float64 {
			if s.Warm() {
				return 1
			}
			return 0
		})
	if reg != nil && s.opts.PluginRestarts != nil {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "metaplane_plugin_restarts_total",
			Help: "Restarts of the backend plugin process since the coordinator started."},
			func() float64 { return float64(s.opts.PluginRestarts()) }))
	}
	if reg != nil {
		reg.MustRegister(m.leader, m.epoch, m.observedEpoch, m.calls, m.tablets, m.imageRevision, m.warm, m.leaderChanges, m.buildInfo,
			m.leaderAndIsrWrites, m.offlineBuckets, m.imageCatchUp,
			newStatusCollector(s), m.grpc)
	}
	return m
}

// serverOptions are the gRPC server options that record every request in
// the gRPC request metrics.
func (m *Metrics) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(m.grpc.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(m.grpc.StreamServerInterceptor())}
}

// buildInfo is the binary's module version, VCS commit and Go version,
// from read (debug.ReadBuildInfo); "unknown" where the binary has no build
// information, an empty commit where the build stamped none.
func buildInfo(read func() (*debug.BuildInfo, bool)) (version, commit, goversion string) {
	version, goversion = "unknown", runtime.Version()
	bi, ok := read()
	if !ok {
		return
	}
	if bi.Main.Version != "" {
		version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		goversion = bi.GoVersion
	}
	for _, st := range bi.Settings {
		if st.Key == "vcs.revision" {
			commit = st.Value
		}
	}
	return
}

// observedLeader counts a change of the observed leader.
func (m *Metrics) observedLeader(prev *core.LeaderInfo, li core.LeaderInfo) {
	if li.ID == "" {
		return
	}
	if prev == nil || prev.ID != li.ID || prev.Epoch != li.Epoch {
		m.leaderChanges.Inc()
	}
}

func (m *Metrics) setLeader(l *leaderState) {
	if l == nil {
		m.leader.Set(0)
		m.epoch.Set(-1)
		return
	}
	m.leader.Set(1)
	m.epoch.Set(float64(l.lead.Epoch()))
}

// statusCollector reads core.Status at scrape time for the Raft metrics,
// on a backend that declares ConsensusStatus. It exports each value under
// its conventional name (metaplane_raft_*) and under the name operators of
// the original know (raftRole, raftTerm, ...); docs/raft.md gives the
// mapping. The per-follower series are the leader's only, and a follower
// without a recent progress report has none (absent, not 0).
type statusCollector struct {
	s                                           *Server
	role, term, commit, applied, lag, followers *prometheus.Desc

	roleSet, termC, commitC, appliedC, lagC, followerLag, followerContact *prometheus.Desc
	diskFree, diskFull                                                    *prometheus.Desc
	proposalsFailed                                                       *prometheus.Desc
}

// raftRoles are the states of the metaplane_raft_role state set.
var raftRoles = []core.Role{core.RoleLeader, core.RoleFollower, core.RoleCandidate, core.RoleObserver,
	core.RoleStandalone, core.RoleUnknown}

func newStatusCollector(s *Server) *statusCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &statusCollector{s: s,
		role:      d("raftRole", "This member's role: 0 unknown, 1 follower, 2 candidate, 3 leader, 4 observer, 5 standalone (also metaplane_raft_role).", "role"),
		term:      d("raftTerm", "The current Raft term, the leader epoch (also metaplane_raft_term)."),
		commit:    d("raftCommitIndex", "The Raft commit index this member knows (also metaplane_raft_commit_index)."),
		applied:   d("raftAppliedIndex", "The Raft index this member has applied (also metaplane_raft_applied_index)."),
		lag:       d("raftApplyLag", "raftCommitIndex - raftAppliedIndex (also metaplane_raft_apply_lag_entries)."),
		followers: d("raftFollowerLag", "On the leader: each follower's lag behind the commit index, in entries, as of its last progress report (also metaplane_raft_follower_lag_entries).", "follower"),

		roleSet:  d("metaplane_raft_role", "This member's Raft role, as a state set: 1 for the current role, 0 for the others.", "role"),
		termC:    d("metaplane_raft_term", "The current Raft term (the leader epoch)."),
		commitC:  d("metaplane_raft_commit_index", "The Raft commit index this member knows."),
		appliedC: d("metaplane_raft_applied_index", "The Raft log index this member has applied."),
		lagC:     d("metaplane_raft_apply_lag_entries", "Entries committed but not yet applied on this member."),
		followerLag: d("metaplane_raft_follower_lag_entries",
			"On the leader only: a follower's lag behind the commit index, in entries, as of its last progress report; absent for a follower without a recent report.", "follower"),
		followerContact: d("metaplane_raft_follower_last_contact_seconds",
			"On the leader only: seconds since the leader's last evidence of contact with the follower; absent when it has none.", "follower"),
		diskFree: d("metaplane_raft_disk_free_bytes", "Free space of coordinator.raft.dir as this member last measured it."),
		diskFull: d("metaplane_raft_disk_full", "1 while this member's replica is paused because coordinator.raft.dir has less free space than coordinator.raft.disk.min-free, else 0."),
		proposalsFailed: d("metaplane_raft_proposals_failed_total",
			"Writes this member proposed to the Raft log that did not commit (timed out, dropped, refused by Raft) since its plugin process started; refusals by the state machine (a bad version, a fence) are not counted."),
	}
}

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.role, c.term, c.commit, c.applied, c.lag, c.followers,
		c.roleSet, c.termC, c.commitC, c.appliedC, c.lagC, c.followerLag, c.followerContact, c.diskFree, c.diskFull, c.proposalsFailed} {
		ch <- d
	}
}

var roleValue = map[core.Role]float64{core.RoleUnknown: 0, core.RoleFollower: 1, core.RoleCandidate: 2,
	core.RoleLeader: 3, core.RoleObserver: 4, core.RoleStandalone: 5}

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	ref := c.s.backend.Load()
	if ref == nil || !ref.b.Capabilities().ConsensusStatus {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := ref.b.Status(ctx)
	if err != nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.role, roleValue[st.Role], string(st.Role))
	gauge(c.term, float64(st.Epoch))
	gauge(c.commit, float64(st.CommitIndex))
	gauge(c.applied, float64(st.AppliedIndex))
	gauge(c.lag, float64(st.CommitIndex-st.AppliedIndex))
	for _, r := range raftRoles {
		v := 0.0
		if st.Role == r {
			v = 1
		}
		gauge(c.roleSet, v, string(r))
	}
	gauge(c.termC, float64(st.Epoch))
	gauge(c.commitC, float64(st.CommitIndex))
	gauge(c.appliedC, float64(st.AppliedIndex))
	gauge(c.lagC, float64(st.CommitIndex-st.AppliedIndex))
	ch <- prometheus.MustNewConstMetric(c.proposalsFailed, prometheus.CounterValue, float64(st.ProposalsFailed))
	if _, ok := st.Details["diskMinFree"]; ok {
		if free, err := strconv.ParseFloat(st.Details["diskFree"], 64); err == nil {
			gauge(c.diskFree, free)
		}
		full := 0.0
		if st.Details["diskFull"] != "" {
			full = 1
		}
		gauge(c.diskFull, full)
	}
	if st.Role != core.RoleLeader {
		return
	}
	now := time.Now()
	for _, m := range st.Members {
		if m.ID == st.MemberID {
			continue
		}
		if m.MatchIndex > 0 {
			gauge(c.followers, float64(m.Lag), m.ID)
			gauge(c.followerLag, float64(m.Lag), m.ID)
		}
		if !m.LastContact.IsZero() {
			gauge(c.followerContact, max(now.Sub(m.LastContact).Seconds(), 0), m.ID)
		}
	}
}

// wrap returns b with every call of the required contract timed into the
// call histogram. The wrapper implements Unwrap and no optional part, so
// core.Optional finds exactly the parts b declares; the coordinator times
// the optional calls it makes itself (timeCall).
func (m *Metrics) wrap(b core.MetadataBackend) core.MetadataBackend {
	return &timedBackend{MetadataBackend: b, h: m.calls}
}

// timeCall runs call and records its latency and outcome as method in the
// call histogram: for the optional parts, which the wrapper does not see.
func (m *Metrics) timeCall(method string, call func() error) error {
	start := time.Now()
	err := call()
	observe(m.calls, method, start, err)
	return err
}

type timedBackend struct {
	core.MetadataBackend
	h *prometheus.HistogramVec
}

// Unwrap returns the backend timed.
func (t *timedBackend) Unwrap() core.MetadataBackend { return t.MetadataBackend }

func (t *timedBackend) observe(method string, start time.Time, err error) {
	observe(t.h, method, start, err)
}

func observe(h *prometheus.HistogramVec, method string, start time.Time, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	h.WithLabelValues(method, outcome).Observe(time.Since(start).Seconds())
}

func (t *timedBackend) GetMany(ctx context.Context, paths []string, opts core.ReadOptions) (r []core.GetResult, err error) {
	start := time.Now()
	r, err = t.MetadataBackend.GetMany(ctx, paths, opts)
	t.observe("GetMany", start, err)
	return
}

func (t *timedBackend) Children(ctx context.Context, path string, opts core.ReadOptions) (c []string, st core.Stat, err error) {
	start := time.Now()
	c, st, err = t.MetadataBackend.Children(ctx, path, opts)
	t.observe("Children", start, err)
	return
}

func (t *timedBackend) Snapshot(ctx context.Context, prefix string) (s core.Snapshot, err error) {
	start := time.Now()
	s, err = t.MetadataBackend.Snapshot(ctx, prefix)
	t.observe("Snapshot", start, err)
	return
}

func (t *timedBackend) Txn(ctx context.Context, ops []core.Op, opts core.TxnOptions) (r core.TxnResult, err error) {
	start := time.Now()
	r, err = t.MetadataBackend.Txn(ctx, ops, opts)
	t.observe("Txn", start, err)
	return
}

func (t *timedBackend) Watch(ctx context.Context, prefix string, from int64) (ch <-chan core.WatchResponse, err error) {
	start := time.Now()
	ch, err = t.MetadataBackend.Watch(ctx, prefix, from)
	t.observe("Watch", start, err)
	return
}

func (t *timedBackend) Status(ctx context.Context) (s core.Status, err error) {
	start := time.Now()
	s, err = t.MetadataBackend.Status(ctx)
	t.observe("Status", start, err)
	return
}
