package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"

	"github.com/spf13/cobra"

	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/plugins"
	"github.com/metaplane/metaplane/tabletserver"
)

func init() { Register(newTabletServerCmd) }

const tabletServerLong = `Runs the reference tablet server: it registers, keeps its registration
alive, follows the metadata into a local view, and serves the
coordinator-to-tablet requests with coordinator-epoch fencing.

On the Raft backend (coordinator.seed.nodes, or no backend key: the
default single coordinator at 127.0.0.1:9123) it registers and follows the
metadata through the coordinator leader's tablet-server RPCs. On the
ZooKeeper backend (zookeeper.address) it has its own ZooKeeper session and
ephemeral /tabletservers/ids/<id>.

It listens on the client listener of bind.listeners when the configuration
sets that key (--listen overrides it; neither: any free port on
127.0.0.1) and registers advertised.listeners' entry of that name, or the
bound address. It finds the coordinators through coordinator.seed.nodes
(none: the default coordinator at 127.0.0.1:9123). Its start line and logs
go to stderr (log.level, log.format). Stop it with Ctrl-C (or SIGTERM).
Exit status: 0 after a clean stop, 1 on an invalid configuration or a
failure, 2 usage error (including no --id and no tablet-server.id).`

func newTabletServerCmd() *cobra.Command {
	var (
		id                       int
		listen, rack, pluginPath string
	)
	cmd := &cobra.Command{
		Use:   "tablet-server",
		Short: "run the reference tablet server (an observer of the metadata)",
		Long:  tabletServerLong,
		Args:  NoArgs,
	}
	cf := AddConfigFlags(cmd.Flags())
	df := addDaemonFlags(cmd.Flags())
	f := cmd.Flags()
	f.IntVar(&id, "id", 0, "the tablet server id `N` (default: tablet-server.id)")
	f.StringVar(&listen, "listen", "", "where the tablet service listens, `host:port`, in place of the client listener of bind.listeners (port 0: any free port; default: bind.listeners when set, else 127.0.0.1:0)")
	f.StringVar(&rack, "rack", "", "the rack to register")
	f.StringVar(&pluginPath, "plugin", "", "on ZooKeeper: run this backend plugin binary instead of metaplane-backend-zookeeper")
	cmd.MarkFlagFilename("plugin")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		opts := df.apply(cf.LoadOptions())
		opts.Observer = true
		cfg, err := LoadDaemonConfig(opts)
		if err != nil {
			return err
		}
		if !cmd.Flags().Changed("id") {
			id = cfg.TabletServerID
		}
		if id < 0 {
			return UsageError("give the server's id with --id N (or tablet-server.id)")
		}
		logger := NewLogger(cmd.ErrOrStderr(), fmt.Sprintf("tablet-server-%d", id), cfg.Log)
		logWarnings(logger, cfg)
		banner := cmd.ErrOrStderr()
		if df.quiet || isJSONLogs(cfg.Log) {
			banner = nil
		}
		err = serveTabletServer(cmd.Context(), banner, logger, cfg, int32(id), listen, rack, pluginPath)
		return daemonExit(cmd.Context(), logger, "tablet server", err)
	}
	return cmd
}

// DefaultCoordinator is the client address of a coordinator started with
// no configuration, which a tablet server with no coordinator.seed.nodes
// dials.
const defaultCoordinator = "127.0.0.1:9123"

// tabletListener binds the tablet service: --listen when given, else the
// client listener of bind.listeners when the configuration sets that key,
// else any free port on loopback. It returns the listener and the value to
// register (NAME://host:port, advertised.listeners' entry when there is
// one).
func tabletListener(cfg *config.Config, listen string) (net.Listener, string, error) {
	cl, err := cfg.ClientListener()
	if err != nil {
		return nil, "", err
	}
	if listen == "" && cfg.Present[config.KeyBindListeners] == config.KeyUnset {
		listen = "127.0.0.1:0"
	}
	if listen == "" {
		l, _, adv, _, err := listenClient(cfg)
		if err != nil {
			return nil, "", err
		}
		return l, cl.Bind.Name + "://" + adv, nil
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, "", fmt.Errorf("--listen %s: %w", listen, err)
	}
	if h, _, err := net.SplitHostPort(listen); err == nil {
		cl.Bind.Host = h
	}
	adv, _ := advertisedAddress(cl, l.Addr())
	return l, cl.Bind.Name + "://" + adv, nil
}

func serveTabletServer(ctx context.Context, out io.Writer, logger *slog.Logger, cfg *config.Config, id int32, listen, rack, pluginPath string) error {
	l, registered, err := tabletListener(cfg, listen)
	if err != nil {
		return err
	}
	defer l.Close()
	opts := tabletserver.Options{ID: id, Listener: l, Listeners: registered, Rack: rack, Logger: logger}
	var serving string
	var reload func()
	if opts.Credentials, opts.Security, serving, reload, err = tabletServiceSecurity(cfg, logger); err != nil {
		return err
	}
	if opts.Credentials != nil {
		// SIGHUP re-reads the tablet service's TLS files and its
		// credentials file, as on a coordinator.
		onSIGHUP(ctx, reload)
	}
	var following string
	if cfg.Selected.Descriptor.TabletServers == core.TabletServersThroughCoordinator {
		seeds := cfg.Coordinator.SeedNodes
		if len(seeds) == 0 {
			seeds = []string{defaultCoordinator}
		}
		opts.Seeds, opts.BackendName = seeds, cfg.Selected.Backend
		opts.MetadataStream = cfg.TabletServerMetadataStream
		if opts.TLS, err = coordinatorClientTLS(cfg); err != nil {
			return err
		}
		if opts.Username, opts.Password, err = coordinatorClientPassword(cfg); err != nil {
			return err
		}
		over := "plaintext"
		if opts.TLS != nil {
			over = "TLS"
		}
		if opts.Username != "" {
			over += " as User:" + opts.Username
		}
		stream := "the metadata stream from any coordinator"
		if cfg.TabletServerMetadataStream == config.MetadataStreamFromLeader {
			stream = "the metadata stream from the leader"
		}
		following = "coordinators " + strings.Join(seeds, ",") + " over " + over + " (" + cfg.Selected.Backend + ": registration through the coordinator leader, " + stream + ")"
	} else {
		p, err := plugins.Launch(ctx, plugins.LaunchOptions{Path: pluginPath, Name: cfg.Selected.Backend,
			Dir: cfg.Metadata.Backend.PluginDir, SHA256: cfg.Metadata.Backend.PluginSHA256, Config: cfg.PluginSettings(), Logger: logger})
		if err != nil {
			return fmt.Errorf("start the %s backend plugin: %w", cfg.Selected.Backend, err)
		}
		defer p.Close()
		opts.Open = func(ctx context.Context) (core.MetadataBackend, error) {
			return p.NewClient(ctx, core.ClientOptions{Name: fmt.Sprintf("tablet-server-%d", id)})
		}
		following = "the " + cfg.Selected.Backend + " backend directly (own session and ephemeral registration)"
	}
	ts, err := tabletserver.New(opts)
	if err != nil {
		return err
	}
	if out != nil {
		fmt.Fprintf(out, "metaplane tablet-server %d listening on %s (%s), registered as %s, following %s\n", id, l.Addr(), serving, registered, following)
	} else {
		logger.Info("tablet server started", "id", id, "listening", l.Addr().String(), "serving", serving, "registered", registered, "following", following)
	}
	return ts.Serve(ctx)
}
