package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"

	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/plugins"
	"github.com/metaplane/metaplane/tabletserver"
)

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
			seeds = []string{DefaultCoordinator}
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

// DefaultCoordinator is the client address of a coordinator started with
// no configuration, which a tablet server with no coordinator.seed.nodes
// dials.
const DefaultCoordinator = "127.0.0.1:9123"
