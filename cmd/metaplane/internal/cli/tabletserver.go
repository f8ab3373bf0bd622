package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/spf13/cobra"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/core/config"
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
ephemeral /tabletservers/ids/<id>. Stop it with Ctrl-C (or SIGTERM).
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
		Args:  noArgs,
	}
	cf := AddConfigFlags(cmd.Flags())
	f := cmd.Flags()
	f.IntVar(&id, "id", -1, "the tablet server id `N` (default: tablet-server.id)")
	f.StringVar(&listen, "listen", "127.0.0.1:0", "where the tablet service listens, `host:port` (port 0: any free port)")
	f.StringVar(&rack, "rack", "", "the rack to register")
	f.StringVar(&pluginPath, "plugin", "", "on ZooKeeper: run this backend plugin binary instead of metaplane-backend-zookeeper")
	cmd.MarkFlagFilename("plugin")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		opts := cf.LoadOptions()
		opts.Observer = true
		cfg, err := loadDaemonConfig(cmd.ErrOrStderr(), opts)
		if err != nil {
			return err
		}
		if id < 0 {
			id = cfg.TabletServerID
		}
		if id < 0 {
			return usageError("give the server's id with --id N (or tablet-server.id)")
		}
		return serveTabletServer(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), cfg, int32(id), listen, rack, pluginPath)
	}
	return cmd
}

func serveTabletServer(ctx context.Context, out, errOut io.Writer, cfg *config.Config, id int32, listen, rack, pluginPath string) error {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", listen, err)
	}
	defer l.Close()
	logger := newLogger(errOut, fmt.Sprintf("tablet-server-%d", id))
	opts := tabletserver.Options{ID: id, Listener: l, Rack: rack, Logger: logger}
	var following string
	if cfg.Selected.Descriptor.TabletServers == core.TabletServersThroughCoordinator {
		seeds := cfg.Coordinator.SeedNodes
		if len(seeds) == 0 {
			if a := listenerAddress(cfg.BindListeners, "CLIENT"); a != "" {
				seeds = []string{a}
			}
		}
		opts.Seeds, opts.BackendName = seeds, cfg.Selected.Backend
		if opts.TLS, err = coordinatorClientTLS(cfg); err != nil {
			return err
		}
		over := "plaintext"
		if opts.TLS != nil {
			over = "TLS"
		}
		following = "coordinators " + strings.Join(seeds, ",") + " over " + over + " (" + cfg.Selected.Backend + ": registration and metadata through the coordinator leader)"
	} else {
		p, err := plugins.Launch(ctx, plugins.LaunchOptions{Path: pluginPath, Name: cfg.Selected.Backend,
			Dir: cfg.Metadata.Backend.PluginDir, SHA256: cfg.Metadata.Backend.PluginSHA256, Config: cfg.Flatten(), Logger: logger})
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
	fmt.Fprintf(out, "metaplane tablet-server %d listening on %s, following %s\n", id, l.Addr(), following)
	return ts.Serve(ctx)
}
