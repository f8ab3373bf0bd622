package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/metaplane/metaplane/adminapi"
	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/gctune"
	"github.com/metaplane/metaplane/plugins"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// clientListenerName is the name of cfg's client listener (see
// config.ClientListener; CLIENT when none can be chosen, which Load
// refuses).
func clientListenerName(cfg *config.Config) string {
	if cl, err := cfg.ClientListener(); err == nil {
		return cl.Bind.Name
	}
	return config.DefaultClientListenerName
}

// binaryHint is how to call this binary from the current directory, for the
// hints printed at start.
func binaryHint() string {
	exe := os.Args[0]
	if !strings.Contains(exe, "/") {
		return exe
	}
	if abs, err := filepath.Abs(exe); err == nil {
		if wd, err := os.Getwd(); err == nil {
			if rel, err := filepath.Rel(wd, abs); err == nil && !strings.HasPrefix(rel, "..") {
				return rel
			}
		}
		return abs
	}
	return exe
}

// advertisedAddress is the host:port the client listener cl, bound at
// bound, is given to others as: its advertised.listeners entry, else the
// bound address with a wildcard host replaced by the machine's host name
// (note says so, for the banner).
func advertisedAddress(cl config.ClientListenerChoice, bound net.Addr) (addr, note string) {
	if cl.Advertised != nil {
		return cl.Advertised.Address(), "advertised.listeners"
	}
	a := bound.String()
	if config.IsWildcardHost(cl.Bind.Host) {
		if tcp, ok := bound.(*net.TCPAddr); ok {
			if h, err := os.Hostname(); err == nil && h != "" {
				return net.JoinHostPort(h, strconv.Itoa(tcp.Port)), "the host name in place of the wildcard " + cl.Bind.Host + "; set advertised.listeners if others reach this host otherwise"
			}
		}
	}
	return a, "the bound address"
}

// listenClient binds the client listener of cfg and returns it with its
// choice and advertised address.
func listenClient(cfg *config.Config) (net.Listener, config.ClientListenerChoice, string, string, error) {
	cl, err := cfg.ClientListener()
	if err != nil {
		return nil, cl, "", "", err
	}
	l, err := net.Listen("tcp", cl.Bind.Address())
	if err != nil {
		return nil, cl, "", "", fmt.Errorf("%s: listen on %s (listener %s): %w", config.KeyBindListeners, cl.Bind.Address(), cl.Bind.Name, err)
	}
	adv, note := advertisedAddress(cl, l.Addr())
	return l, cl, adv, note, nil
}

// serveCoordinator runs the coordinator until ctx ends. It prints the
// start-up banner on w, or, when w is nil, logs its facts as one line.
func serveCoordinator(ctx context.Context, w io.Writer, cfg *config.Config, id, pluginPath string, logger *slog.Logger) error {
	l, cl, advertised, advNote, err := listenClient(cfg)
	if err != nil {
		return err
	}
	defer l.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var metricsAddr string
	var mux *http.ServeMux
	if cfg.MetricsAddress != "" {
		ml, err := net.Listen("tcp", cfg.MetricsAddress)
		if err != nil {
			return fmt.Errorf("metrics.address: listen on %s: %w", cfg.MetricsAddress, err)
		}
		metricsAddr = ml.Addr().String()
		mux = http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		if cfg.MetricsPprof {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go hs.Serve(ml)
		defer hs.Close()
	}

	memBanner := startGCTuner(cfg, logger)
	defer memBanner.stop()

	sec, err := listenerSecurity(cfg, logger)
	if err != nil {
		return err
	}
	if sec.reloader != nil {
		// SIGHUP re-reads the TLS files now (a change is also noticed at
		// the next handshake) and the credentials file.
		onSIGHUP(ctx, sec.reloadAll)
	}

	gossipHost, _, _ := net.SplitHostPort(l.Addr().String()) // the client listener's host
	gossipNode, stopGossip, gossipBanner, err := startGossip(cfg, id, gossipHost, advertised, logger)
	if err != nil {
		return err
	}
	defer stopGossip()
	var gossipOpt coordinator.Gossip // nil unless enabled (not a typed nil)
	if gossipNode != nil {
		gossipOpt = gossipNode
	}

	flat := cfg.PluginSettings()
	if cfg.LearnsClusterIDOnJoin() {
		cid, err := learnClusterID(ctx, cfg, advertised, logger)
		if err != nil {
			return err
		}
		if cid != "" {
			flat["coordinator.raft.cluster-id"] = cid
		}
	}
	p, err := plugins.Launch(ctx, plugins.LaunchOptions{
		Path: pluginPath, Name: cfg.Selected.Backend, Dir: cfg.Metadata.Backend.PluginDir,
		SHA256: cfg.Metadata.Backend.PluginSHA256, Config: flat, Logger: logger,
	})
	if err != nil {
		return fmt.Errorf("start the %s backend plugin: %w", cfg.Selected.Backend, err)
	}
	defer p.Close()

	// The leader dials the tablet servers' tablet service as the tablet
	// servers dial it: the client listener's protocol, security.tls.* and
	// client.security.sasl.*.
	tabletTLS, err := coordinatorClientTLS(cfg)
	if err != nil {
		return err
	}
	tabletUser, tabletPW, err := coordinatorClientPassword(cfg)
	if err != nil {
		return err
	}
	srv, err := coordinator.New(coordinator.Options{
		Open: func(ctx context.Context) (core.MetadataBackend, error) {
			return p.NewClient(ctx, core.ClientOptions{Name: "coordinator-" + id})
		},
		Listener:                   l,
		Credentials:                sec.creds,
		Security:                   sec.auth,
		TabletTLS:                  tabletTLS,
		TabletUsername:             tabletUser,
		TabletPassword:             tabletPW,
		AdvertisedListeners:        cl.Bind.Name + "://" + advertised,
		ID:                         id,
		TabletServerSessionTimeout: cfg.Coordinator.TabletServerSessionTimeout,
		MetadataStreamMaxWait:      cfg.Coordinator.MetadataStreamMaxWait,
		MaxConcurrentSnapshots:     cfg.Coordinator.MetadataStreamMaxSnapshots,
		RequestRetention:           cfg.Coordinator.RequestRetention,
		MaxRequestRecords:          cfg.Coordinator.MaxRequestRecords,
		IDBlockSize:                cfg.Coordinator.Raft.IDBlockSize,
		MaxBucketNum:               int32(cfg.MaxBucketNum), // validated: at most MaxInt32
		MaxPartitionNum:            cfg.MaxPartitionNum,
		ImageLoadTimeout:           cfg.Coordinator.Raft.CatchupTimeout,
		Logger:                     logger,
		Registerer:                 reg,
		PluginRestarts:             p.Restarts,
		Fatal:                      p.Done(),
		FatalErr:                   p.Err,
		Gossip:                     gossipOpt,
	})
	if err != nil {
		return err
	}
	if mux != nil {
		mux.Handle("/healthz", srv.HealthzHandler())
		mux.Handle("/readyz", srv.ReadyzHandler())
	}

	b := &bannerLines{w: w}
	b.line("metaplane coordinator %s", id)
	// The backend is the one the plugin says it is: --plugin can run
	// another backend than the configuration selects (the memory backend
	// for a test), and then the selected backend's keys are not used.
	running := p.Descriptor().Name
	attrs := []any{"coordinator", id, "backend", running, "selected_by", cfg.Selected.SelectedBy}
	if running == cfg.Selected.Backend {
		b.line("  backend:  %s (selected by %s)", running, cfg.Selected.SelectedBy)
	} else {
		b.line("  backend:  %s (plugin %s from --plugin; the configuration selects %s by %s, and its keys are not used)", running, p.Path(), cfg.Selected.Backend, cfg.Selected.SelectedBy)
		attrs = append(attrs, "plugin", p.Path(), "configured_backend", cfg.Selected.Backend)
	}
	for _, f := range cfg.BackendFacts(running) {
		b.line("  %s", f.Line)
		attrs = append(attrs, f.Attrs...)
	}
	b.line("  clients:  %s (%s)", advertised, sec.banner)
	b.line("  listener: %s, bound on %s (%s); advertised: %s", cl.Bind.Name, l.Addr(), cl.Reason, advNote)
	attrs = append(attrs, "clients", advertised, "security", sec.banner, "listener", cl.Bind.Name, "bound", l.Addr().String(), "listener_chosen_by", cl.Reason, "advertised_from", advNote)
	if len(cl.Unbound) > 0 {
		var un []string
		for _, u := range cl.Unbound {
			un = append(un, u.String())
		}
		b.line("  not bound: %s (metaplane serves the client listener only)", strings.Join(un, ", "))
		attrs = append(attrs, "not_bound", strings.Join(un, ","))
	}
	if gossipBanner != "" {
		b.line("  gossip:   %s", gossipBanner)
		attrs = append(attrs, "gossip", gossipBanner)
	}
	b.line("  memory:   %s", memBanner.line)
	attrs = append(attrs, "memory", memBanner.line)
	if metricsAddr != "" {
		b.line("  metrics:  http://%s/metrics", metricsAddr)
		if cfg.MetricsPprof {
			b.line("  pprof:    http://%s/debug/pprof/ (metrics.pprof)", metricsAddr)
			attrs = append(attrs, "pprof", "http://"+metricsAddr+"/debug/pprof/")
		}
		attrs = append(attrs, "metrics", "http://"+metricsAddr+"/metrics")
	}
	hint := binaryHint()
	bs := ""
	if advertised != "127.0.0.1:9123" {
		bs = " --bootstrap-servers " + advertised
	}
	if sec.creds != nil {
		bs += " --tls-ca CA.pem"
		if cfg.Security.TLS.ClientAuth == "required" {
			bs += " --tls-cert CLIENT.pem --tls-key CLIENT-key.pem"
		}
		if sec.auth.Passwords != nil {
			bs += " --user NAME --password-file PASSWORD-FILE"
		}
	}
	b.line("try:\n  %s admin create-database demo%s\n  %s admin create-table demo.orders --column id:BIGINT --column amount:DOUBLE --primary-key id --buckets 3%s\n  %s admin list-tables demo%s",
		hint, bs, hint, bs, hint, bs)
	if sec.creds != nil {
		b.line("  (CA.pem: the CA that signed security.tls.cert-file; CLIENT.pem: a client certificate; see docs/security.md)")
	}
	if w == nil {
		logger.Info("coordinator started", attrs...)
	}
	err = srv.Serve(ctx)
	p.Close() // logs "plugin stopped"
	return err
}

// bannerLines prints the lines of a start-up banner on w (nothing when w
// is nil), each as one write so that log lines never cut into them.
type bannerLines struct{ w io.Writer }

func (b *bannerLines) line(format string, args ...any) {
	if b.w != nil {
		fmt.Fprintf(b.w, format+"\n", args...)
	}
}

// learnClusterIDTimeout bounds how long a joining coordinator asks the
// seeds for the cluster id.
const learnClusterIDTimeout = 15 * time.Second

// learnClusterID asks the coordinators of coordinator.seed.nodes (not this
// one, advertised) for the Raft cluster id a joining voter must use, and
// checks it against coordinator.raft.cluster-id when that is set. It
// returns "" when no seed answered in time (the backend then derives the
// id from coordinator.raft.voters, docs/raft.md) and an error when a seed
// reports another id than the configured one.
func learnClusterID(ctx context.Context, cfg *config.Config, advertised string, logger *slog.Logger) (string, error) {
	configured := ""
	if id := cfg.Coordinator.Raft.ClusterID; id != 0 {
		configured = strconv.FormatUint(id, 10)
	}
	var seeds []string
	for _, s := range cfg.Coordinator.SeedNodes {
		if adminapi.HostPort(s) != advertised {
			seeds = append(seeds, adminapi.HostPort(s))
		}
	}
	if len(seeds) == 0 {
		return configured, nil
	}
	tlsConf, err := coordinatorClientTLS(cfg)
	if err != nil {
		return "", err
	}
	user, pw, err := coordinatorClientPassword(cfg)
	if err != nil {
		return "", err
	}
	ask, err := adminclient.NewClientWithOptions(seeds, adminclient.Options{TLS: tlsConf, Username: user, Password: pw})
	if err != nil {
		return "", err
	}
	defer ask.Close()
	lctx, cancel := context.WithTimeout(ctx, learnClusterIDTimeout)
	defer cancel()
	var errs []string
	for lctx.Err() == nil {
		errs = errs[:0]
		for _, s := range seeds {
			cctx, ccancel := context.WithTimeout(lctx, 2*time.Second)
			r, err := ask.RaftStatusFrom(cctx, s)
			ccancel()
			switch {
			case err != nil:
				errs = append(errs, fmt.Sprintf("%s: %v", s, err))
			case r.GetClusterId() == "":
				errs = append(errs, s+": no cluster id in its answer")
			case configured != "" && r.GetClusterId() != configured:
				return "", fmt.Errorf("coordinator.raft.cluster-id is %s but the coordinator at %s belongs to cluster %s: "+
					"this coordinator would not join that cluster (fix or unset coordinator.raft.cluster-id)", configured, s, r.GetClusterId())
			default:
				logger.Info("joining the Raft cluster the seeds report", "cluster_id", r.GetClusterId(), "asked", s)
				return r.GetClusterId(), nil
			}
		}
		select {
		case <-lctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	if configured != "" {
		logger.Warn("no seed coordinator reported the Raft cluster id: joining with coordinator.raft.cluster-id unchecked",
			"cluster_id", configured, "errors", strings.Join(errs, "; "))
		return configured, nil
	}
	logger.Warn("no seed coordinator reported the Raft cluster id: the joiner derives it from coordinator.raft.voters without itself, "+
		"which must be the voters the cluster was bootstrapped with (or set coordinator.raft.cluster-id)",
		"errors", strings.Join(errs, "; "))
	return "", nil
}

// gcTuning is the coordinator's collector setting: the tuner (nil when
// off) and the banner's line about it.
type gcTuning struct {
	tuner *gctune.Tuner
	line  string
}

func (g gcTuning) stop() { g.tuner.Stop() }

// startGCTuner bounds the coordinator's heap growth between collections
// by coordinator.memory.gc-headroom (see package gctune), unless GOGC or
// GOMEMLIMIT is set (Go's own controls win) or the key is 0.
func startGCTuner(cfg *config.Config, logger *slog.Logger) gcTuning {
	if v := gctune.Overridden(os.Getenv); v != "" {
		return gcTuning{line: fmt.Sprintf("the collector as %s=%s says (coordinator.memory.gc-headroom not used)", v, os.Getenv(v))}
	}
	h := cfg.Coordinator.GCHeadroom
	if h <= 0 {
		return gcTuning{line: "Go's default collector (coordinator.memory.gc-headroom=0)"}
	}
	t := gctune.Start(gctune.Options{Headroom: int64(h), OnSet: func(p int, live uint64) {
		logger.Debug("gc headroom: GOGC set", "gogc", p, "live_heap_bytes", live)
	}})
	return gcTuning{tuner: t, line: fmt.Sprintf("the Go heap is collected once it grows %s above its live size (coordinator.memory.gc-headroom; at least a tenth of the live size, at most the live size as by default)", h)}
}
