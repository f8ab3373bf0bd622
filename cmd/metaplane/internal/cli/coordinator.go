package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/core/config"
	"github.com/metaplane/metaplane/plugins"
)

func init() { Register(newCoordinatorCmd) }

const coordinatorLong = `Runs a coordinator: loads the configuration, selects the metadata backend
(zookeeper.address: ZooKeeper; coordinator.seed.nodes: Raft; neither:
metadata.backend.default, raft out of the box), starts its plugin,
campaigns, and serves the admin API on the CLIENT listener (bind.listeners,
default CLIENT://127.0.0.1:9123) while it leads, over TLS when
security.protocol.map maps CLIENT to SSL (SIGHUP re-reads the certificate
files; docs/security.md). A standby answers every call with NOT_LEADER and
the leader's address. Metrics are served at
http://<metrics.address>/metrics, probes at /healthz and /readyz, and the
grpc.health.v1 service on the CLIENT listener (docs/raft.md, Operations).
Stop it with Ctrl-C (or SIGTERM).
Exit status: 0 after a clean stop, 1 on an invalid configuration or a
failure, 2 usage error.`

// loadDaemonConfig loads the configuration of a daemon (coordinator,
// tablet server) and prints the selection's warnings on stderr.
func loadDaemonConfig(stderr io.Writer, opts config.LoadOptions) (*config.Config, error) {
	cfg, err := config.Load(opts)
	if err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	for _, w := range cfg.Selected.Warnings {
		fmt.Fprintf(stderr, "WARNING: %s\n", w)
	}
	return cfg, nil
}

// listenerAddress returns host:port of the listener named name in a list
// of NAME://host:port entries ("" when absent).
func listenerAddress(listeners []string, name string) string {
	for _, l := range listeners {
		if n, addr, ok := strings.Cut(l, "://"); ok && strings.EqualFold(n, name) {
			return addr
		}
	}
	return ""
}

// newLogger returns the process's logger: text lines on w at Info level
// (Debug with METAPLANE_LOG_LEVEL=debug).
func newLogger(w io.Writer, name string) *slog.Logger {
	level := slog.LevelInfo
	if strings.EqualFold(os.Getenv("METAPLANE_LOG_LEVEL"), "debug") {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})).With("process", name)
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

func newCoordinatorCmd() *cobra.Command {
	var pluginPath string
	cmd := &cobra.Command{
		Use:   "coordinator",
		Short: "run a coordinator (with no configuration: a single-voter Raft coordinator on loopback)",
		Long:  coordinatorLong,
		Args:  noArgs,
	}
	cf := AddConfigFlags(cmd.Flags())
	cmd.Flags().StringVar(&pluginPath, "plugin", "", "run this backend plugin binary instead of metaplane-backend-<backend> from metadata.backend.plugin.dir")
	cmd.MarkFlagFilename("plugin")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := loadDaemonConfig(cmd.ErrOrStderr(), cf.LoadOptions())
		if err != nil {
			return err
		}
		id := uuid.NewString()
		logger := newLogger(cmd.ErrOrStderr(), "coordinator")
		return serveCoordinator(cmd.Context(), cmd.OutOrStdout(), cfg, id, pluginPath, logger)
	}
	return cmd
}

func serveCoordinator(ctx context.Context, w io.Writer, cfg *config.Config, id, pluginPath string, logger *slog.Logger) error {
	bind := listenerAddress(cfg.BindListeners, "CLIENT")
	if bind == "" {
		return fmt.Errorf("bind.listeners %v has no CLIENT listener", cfg.BindListeners)
	}
	l, err := net.Listen("tcp", bind)
	if err != nil {
		return fmt.Errorf("bind.listeners: listen on %s: %w", bind, err)
	}
	defer l.Close()
	advertised := listenerAddress(cfg.AdvertisedListeners, "CLIENT")
	if advertised == "" {
		advertised = l.Addr().String()
	}

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
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go hs.Serve(ml)
		defer hs.Close()
	}

	sec, err := listenerSecurity(cfg, logger)
	if err != nil {
		return err
	}
	if sec.reloader != nil {
		// SIGHUP re-reads the TLS files now (a change is also noticed at
		// the next handshake).
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-hup:
					sec.reloader.Reload() // OnReload logs the outcome
				}
			}
		}()
	}

	flat := cfg.Flatten()
	p, err := plugins.Launch(ctx, plugins.LaunchOptions{
		Path: pluginPath, Name: cfg.Selected.Backend, Dir: cfg.Metadata.Backend.PluginDir,
		SHA256: cfg.Metadata.Backend.PluginSHA256, Config: flat, Logger: logger,
	})
	if err != nil {
		return fmt.Errorf("start the %s backend plugin: %w", cfg.Selected.Backend, err)
	}
	defer p.Close()

	srv, err := coordinator.New(coordinator.Options{
		Open: func(ctx context.Context) (core.MetadataBackend, error) {
			return p.NewClient(ctx, core.ClientOptions{Name: "coordinator-" + id})
		},
		Listener:                   l,
		Credentials:                sec.creds,
		AdvertisedListeners:        "CLIENT://" + advertised,
		ID:                         id,
		TabletServerSessionTimeout: cfg.Coordinator.TabletServerSessionTimeout,
		MetadataStreamMaxWait:      cfg.Coordinator.MetadataStreamMaxWait,
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
	})
	if err != nil {
		return err
	}
	if mux != nil {
		mux.Handle("/healthz", srv.HealthzHandler())
		mux.Handle("/readyz", srv.ReadyzHandler())
	}

	fmt.Fprintf(w, "metaplane coordinator %s\n", id)
	fmt.Fprintf(w, "  backend:  %s (selected by %s)\n", cfg.Selected.Backend, cfg.Selected.SelectedBy)
	switch cfg.Selected.Backend {
	case config.BackendRaft:
		self := cfg.RaftNodeID()
		for _, v := range cfg.RaftVoters() {
			if v.ID == self {
				fmt.Fprintf(w, "  raft:     voter %d of %d on %s, data in %s\n", v.ID, len(cfg.RaftVoters()), net.JoinHostPort(v.Host, strconv.Itoa(v.Port)), cfg.Coordinator.Raft.Dir)
			}
		}
	case config.BackendZooKeeper:
		fmt.Fprintf(w, "  zookeeper: %s (root %s)\n", strings.Join(cfg.ZooKeeper.Address, ","), cfg.ZooKeeper.PathRoot)
		fmt.Fprintf(w, "  %s\n", cfg.ZooKeeperFailover())
	}
	fmt.Fprintf(w, "  clients:  %s (%s)\n", advertised, sec.banner)
	if metricsAddr != "" {
		fmt.Fprintf(w, "  metrics:  http://%s/metrics\n", metricsAddr)
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
	}
	fmt.Fprintf(w, "try:\n  %s admin create-database demo%s\n  %s admin create-table demo.orders --column id:BIGINT --column amount:DOUBLE --primary-key id --buckets 3%s\n  %s admin list-tables demo%s\n",
		hint, bs, hint, bs, hint, bs)
	if sec.creds != nil {
		fmt.Fprintf(w, "  (CA.pem: the CA that signed security.tls.cert-file; CLIENT.pem: a client certificate; see docs/security.md)\n")
	}
	if f, ok := w.(interface{ Sync() error }); ok {
		f.Sync()
	}
	return srv.Serve(ctx)
}
