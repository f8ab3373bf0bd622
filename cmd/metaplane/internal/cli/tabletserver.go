package cli

import (
	"fmt"

	"github.com/metaplane/metaplane/daemon"
	"github.com/spf13/cobra"
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
		err = daemon.RunTabletServer(cmd.Context(), daemon.TabletServerOptions{Config: cfg, ID: int32(id), Listen: listen, Rack: rack, PluginPath: pluginPath, Logger: logger, Banner: banner})
		return daemonExit(cmd.Context(), logger, "tablet server", err)
	}
	return cmd
}
