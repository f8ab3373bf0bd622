package cli

import (
	"context"
	"flag"
	"fmt"
	"net"
	"strings"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/core/config"
	"github.com/metaplane/metaplane/plugins"
	"github.com/metaplane/metaplane/tabletserver"
)

func init() {
	Register(Command{Name: "tablet-server", Summary: "run the reference tablet server (an observer of the metadata)", Run: runTabletServer})
}

const tabletServerUsage = `usage: metaplane tablet-server --id N [--listen host:port] [--config FILE] [-D key=value ...]

Runs the reference tablet server: it registers, keeps its registration
alive, follows the metadata into a local view, and serves the
coordinator-to-tablet requests with coordinator-epoch fencing.

On the Raft backend (coordinator.seed.nodes, or no backend key: the
default single coordinator at 127.0.0.1:9123) it registers and follows the
metadata through the coordinator leader's tablet-server RPCs. On the
ZooKeeper backend (zookeeper.address) it has its own ZooKeeper session and
ephemeral /tabletservers/ids/<id>.

flags:
`

func runTabletServer(ctx context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("metaplane tablet-server", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	cf := AddConfigFlags(fs)
	id := fs.Int("id", -1, "the tablet server id `N` (default: tablet-server.id)")
	listen := fs.String("listen", "127.0.0.1:0", "where the tablet service listens, `host:port` (port 0: any free port)")
	rack := fs.String("rack", "", "the rack to register")
	pluginPath := fs.String("plugin", "", "on ZooKeeper: run this backend plugin binary instead of metaplane-backend-zookeeper")
	if code, ok := parseFlags(env, fs, "metaplane tablet-server", tabletServerUsage, args); !ok {
		return code
	}
	opts := cf.LoadOptions()
	opts.Observer = true
	cfg, err := config.Load(opts)
	if err != nil {
		fmt.Fprintf(env.Stderr, "metaplane tablet-server: invalid configuration:\n%v\n", err)
		return ExitFailure
	}
	for _, w := range cfg.Selected.Warnings {
		fmt.Fprintf(env.Stderr, "WARNING: %s\n", w)
	}
	if *id < 0 {
		*id = cfg.TabletServerID
	}
	if *id < 0 {
		fmt.Fprintln(env.Stderr, "metaplane tablet-server: give the server's id with --id N (or tablet-server.id)")
		return ExitUsage
	}
	if err := serveTabletServer(ctx, env, cfg, int32(*id), *listen, *rack, *pluginPath); err != nil {
		fmt.Fprintf(env.Stderr, "metaplane tablet-server: %v\n", err)
		return ExitFailure
	}
	return ExitOK
}

func serveTabletServer(ctx context.Context, env *Env, cfg *config.Config, id int32, listen, rack, pluginPath string) error {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", listen, err)
	}
	defer l.Close()
	logger := newLogger(env.Stderr, fmt.Sprintf("tablet-server-%d", id))
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
		following = "coordinators " + strings.Join(seeds, ",") + " (" + cfg.Selected.Backend + ": registration and metadata through the coordinator leader)"
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
	fmt.Fprintf(env.Stdout, "metaplane tablet-server %d listening on %s, following %s\n", id, l.Addr(), following)
	return ts.Serve(ctx)
}
