package cli

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/daemon"
)

func init() { Register(newCoordinatorCmd) }

const coordinatorLong = `Runs a coordinator: loads the configuration, selects the metadata backend
(zookeeper.address: ZooKeeper; coordinator.seed.nodes: Raft; neither:
metadata.backend.default, raft out of the box), starts its plugin,
campaigns, and serves the admin API on the client listener while it leads:
the only entry of bind.listeners (default CLIENT://127.0.0.1:9123), or with
several the one client.listener.name names (default: the one
internal.listener.name does not), over TLS when security.protocol.map
maps it to SSL (SIGHUP re-reads the certificate files; docs/security.md).
A standby answers every call with NOT_LEADER and the leader's address
(advertised.listeners). Metrics are served at
http://<metrics.address>/metrics, probes at /healthz and /readyz, and the
grpc.health.v1 service on the client listener (docs/raft.md, Operations).
The banner and the logs go to stderr (log.level, log.format; --quiet: no
banner). Stop it with Ctrl-C (or SIGTERM).
Exit status: 0 after a clean stop, 1 on an invalid configuration or a
failure, 2 usage error.`

// LoadDaemonConfig loads the configuration of a process that runs a
// backend (coordinator, tablet server, migrate). The caller builds its
// logger from it (NewLogger) and logs the selection's warnings on it
// (logWarnings), so that they come in the configured log format.
func LoadDaemonConfig(opts config.LoadOptions) (*config.Config, error) {
	cfg, err := config.Load(opts)
	if err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	return cfg, nil
}

// logWarnings logs the warnings of the backend selection (the deprecation
// of ZooKeeper).
func logWarnings(logger *slog.Logger, cfg *config.Config) {
	for _, w := range cfg.Selected.Warnings {
		logger.Warn(w)
	}
}

func newCoordinatorCmd() *cobra.Command {
	var pluginPath string
	cmd := &cobra.Command{
		Use:   "coordinator",
		Short: "run a coordinator (with no configuration: a single-voter Raft coordinator on loopback)",
		Long:  coordinatorLong,
		Args:  NoArgs,
	}
	cf := AddConfigFlags(cmd.Flags())
	df := addDaemonFlags(cmd.Flags())
	cmd.Flags().StringVar(&pluginPath, "plugin", "", "run this backend plugin binary instead of metaplane-backend-<backend> from metadata.backend.plugin.dir")
	cmd.MarkFlagFilename("plugin")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := LoadDaemonConfig(df.apply(cf.LoadOptions()))
		if err != nil {
			return err
		}
		id := uuid.NewString()
		logger := NewLogger(cmd.ErrOrStderr(), "coordinator", cfg.Log)
		logWarnings(logger, cfg)
		banner := cmd.ErrOrStderr()
		if df.quiet || isJSONLogs(cfg.Log) {
			banner = nil
		}
		err = daemon.RunCoordinator(cmd.Context(), daemon.CoordinatorOptions{Config: cfg, ID: id, PluginPath: pluginPath, Logger: logger, Banner: banner})
		return daemonExit(cmd.Context(), logger, "coordinator", err)
	}
	return cmd
}

// daemonExit logs why a daemon ends, its last line: "<what> stopped" with
// the signal that stopped it, or "<what> exiting" with the error, after
// which the command prints nothing more (the error is in the log line, in
// the log format) and exits with the error's status.
func daemonExit(ctx context.Context, logger *slog.Logger, what string, err error) error {
	if err != nil {
		logger.Error(what+" exiting", "reason", operatorMessage(err))
		return ExitWith(exitCode(err))
	}
	reason := "the server stopped"
	if c := context.Cause(ctx); c != nil {
		reason = c.Error()
	}
	logger.Info(what+" stopped", "reason", reason)
	return nil
}
