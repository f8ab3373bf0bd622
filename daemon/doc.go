// Package daemon assembles the processes metaplane runs, from a loaded
// configuration (*config.Config): a coordinator (the client listener with
// its TLS, passwords and authorizer, SIGHUP reloads, the metrics and probe
// listener, gossip, the backend plugin, the Raft cluster id a joining
// member learns from the seeds, the start-up banner) and a reference
// tablet server. The command line only parses flags, loads the
// configuration and calls RunCoordinator or RunTabletServer.
package daemon

import (
	"context"
	"io"
	"log/slog"

	"github.com/metaplane/metaplane/config"
)

// CoordinatorOptions are what RunCoordinator runs.
type CoordinatorOptions struct {
	Config *config.Config
	// ID is the coordinator's id (a UUID, new at every start).
	ID string
	// PluginPath runs this backend plugin binary instead of
	// metaplane-backend-<backend> from metadata.backend.plugin.dir.
	PluginPath string
	Logger     *slog.Logger
	// Banner receives the start-up banner; nil logs its facts as one
	// line instead.
	Banner io.Writer
}

// RunCoordinator runs a coordinator until ctx ends.
func RunCoordinator(ctx context.Context, o CoordinatorOptions) error {
	return serveCoordinator(ctx, o.Banner, o.Config, o.ID, o.PluginPath, o.Logger)
}

// TabletServerOptions are what RunTabletServer runs.
type TabletServerOptions struct {
	Config *config.Config
	ID     int32
	// Listen is the tablet service's host:port ("": the client listener of
	// bind.listeners when the configuration sets that key, else a free
	// port on loopback).
	Listen, Rack string
	// PluginPath: as CoordinatorOptions.PluginPath, for a backend tablet
	// servers follow directly.
	PluginPath string
	Logger     *slog.Logger
	// Banner receives the start-up line; nil logs it.
	Banner io.Writer
}

// RunTabletServer runs a reference tablet server until ctx ends.
func RunTabletServer(ctx context.Context, o TabletServerOptions) error {
	return serveTabletServer(ctx, o.Banner, o.Logger, o.Config, o.ID, o.Listen, o.Rack, o.PluginPath)
}
