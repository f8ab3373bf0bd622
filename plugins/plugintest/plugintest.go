// Package plugintest runs backends across the plugin boundary for tests
// and for `metaplane conformance`: conformance harnesses whose stores are
// real plugin processes (Harness) or providers served over go-plugin's
// in-process gRPC connection (InProcessHarness).
package plugintest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	plugin "github.com/hashicorp/go-plugin"

	"github.com/metaplane/metaplane/conformance"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/plugins"
	pb "github.com/metaplane/metaplane/proto/metaplane/v1"
)

// Options tune a harness.
type Options struct {
	// Config is the flat configuration each store's plugin is started with
	// (e.g. {"zookeeper.address": "127.0.0.1:2181"}).
	Config map[string]string
	// Logger receives the host's plugin events and the plugin's logs; nil
	// discards them.
	Logger *slog.Logger
	// StartTimeout bounds the start of one store's plugin (default 30s).
	StartTimeout time.Duration
	// PerStore, when set, returns settings for the n-th store (n counts
	// from 1) that override Config, e.g. a fresh zookeeper.path.root so
	// that the stores of one run on a shared server do not see each other.
	PerStore func(n int) map[string]string
	// HostAnswers opens the stores' clients with Plugin.NewClient, as a
	// coordinator does, whose host side answers some calls itself (an
	// already ended context, calls after Close). By default they are
	// opened with Plugin.NewConformanceClient, so that the plugin's
	// backend answers those too and the suite tests it, not the host.
	HostAnswers bool
}

// config returns the configuration of the n-th store.
func (o Options) config(n int) map[string]string {
	if o.PerStore == nil {
		return o.Config
	}
	out := make(map[string]string, len(o.Config))
	for k, v := range o.Config {
		out[k] = v
	}
	for k, v := range o.PerStore(n) {
		out[k] = v
	}
	return out
}

func (o Options) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func (o Options) startTimeout() time.Duration {
	if o.StartTimeout > 0 {
		return o.StartTimeout
	}
	return 30 * time.Second
}

// Harness returns a conformance harness whose every store is a fresh
// process of the plugin binary at path, started with opts.Config; a
// store's clients are clients of that one process. opts.PerStore adds
// settings per store. The process is stopped
// at the store's cleanup.
func Harness(path string, opts Options) conformance.Harness {
	var stores atomic.Int64
	return conformance.Harness{
		Name: path,
		NewStore: func(t conformance.T) conformance.Store {
			t.Helper()
			n := int(stores.Add(1))
			ctx, cancel := context.WithTimeout(context.Background(), opts.startTimeout())
			defer cancel()
			p, err := plugins.Launch(ctx, plugins.LaunchOptions{
				Path:         path,
				Logger:       opts.logger(),
				Config:       opts.config(n),
				StartTimeout: opts.startTimeout(),
			})
			if err != nil {
				t.Fatalf("launch plugin %s: %v", path, err)
			}
			t.Cleanup(func() { _ = p.Close() })
			return newStore(p, opts)
		},
	}
}

// newStore returns the store of p: a CompactingStore when p's provider can
// compact its history.
func newStore(p *plugins.Plugin, opts Options) conformance.Store {
	s := &Store{Plugin: p, HostAnswers: opts.HostAnswers}
	if p.CanCompactHistory() {
		return CompactingStore{s}
	}
	return s
}

// InProcessHarness returns a conformance harness whose every store is a
// fresh provider from newProvider, served through the plugin shim (the
// plugin-side server and the host-side client) over go-plugin's
// in-process gRPC connection (plugin.TestPluginGRPCConn), started with
// opts.Config (and opts.PerStore). tb is the test the connections belong
// to.
func InProcessHarness(tb testing.TB, newProvider func() core.Provider, opts Options) conformance.Harness {
	var stores atomic.Int64
	return conformance.Harness{
		Name: "in-process plugin shim",
		NewStore: func(t conformance.T) conformance.Store {
			t.Helper()
			o := opts
			o.Config = opts.config(int(stores.Add(1)))
			p, closeConn := ConnectInProcess(tb, newProvider(), o)
			t.Cleanup(func() {
				_ = p.Close()
				closeConn()
			})
			return newStore(p, opts)
		},
	}
}

// ConnectInProcess serves provider through the plugin shim over go-plugin's
// in-process gRPC connection and returns the host's handle on it, started
// with opts.Config, and a function that closes the connection (and the
// provider). A failure fails tb.
func ConnectInProcess(tb testing.TB, provider core.Provider, opts Options) (*plugins.Plugin, func()) {
	tb.Helper()
	client, server := plugin.TestPluginGRPCConn(tb, false, plugins.PluginSets(provider)[plugins.ProtocolVersion])
	raw, err := client.Dispense(plugins.PluginName)
	if err != nil {
		tb.Fatalf("dispense %s: %v", plugins.PluginName, err)
	}
	rpc, ok := raw.(pb.BackendClient)
	if !ok {
		tb.Fatalf("dispensed %T, want a metaplane.v1 Backend client", raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.startTimeout())
	defer cancel()
	p, err := plugins.Connect(ctx, rpc, opts.Config, opts.logger())
	if err != nil {
		tb.Fatalf("start in-process plugin: %v", err)
	}
	return p, func() {
		// Stop the server first: closing the client first would make the
		// server stop itself concurrently (go-plugin's controller), a race.
		server.Stop()
		_ = client.Close()
		_ = provider.Close()
	}
}

// Store is one store of a plugin harness: one plugin (process or
// in-process connection) and its clients.
type Store struct {
	// Plugin is the host's handle on the store's plugin.
	Plugin *plugins.Plugin
	// HostAnswers: see Options.HostAnswers.
	HostAnswers bool
}

// clientTimeout bounds opening a client and expiring a session.
const clientTimeout = 30 * time.Second

// NewClient opens a client of the store's plugin, closed at t's cleanup.
func (s *Store) NewClient(t conformance.T, opts conformance.ClientOptions) core.MetadataBackend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	open := s.Plugin.NewConformanceClient
	if s.HostAnswers {
		open = s.Plugin.NewClient
	}
	c, err := open(ctx, core.ClientOptions{SessionTimeout: opts.SessionTimeout, Name: t.Name()})
	if err != nil {
		t.Fatalf("open a plugin client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ExpireSession expires c's session through the plugin's SessionExpirer.
func (s *Store) ExpireSession(t conformance.T, c core.MetadataBackend) {
	t.Helper()
	se, ok := core.Optional[core.SessionExpirer](c)
	if !ok {
		t.Fatalf("%s", fmt.Sprintf("the plugin's backend cannot expire a session on demand (core.SessionExpirer): client %T", c))
	}
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	if err := se.ExpireSession(ctx); err != nil {
		t.Fatalf("expire session: %v", err)
	}
}

// CompactingStore is a Store whose plugin can compact its change history
// (core.HistoryCompactor): it implements conformance.Compactor.
type CompactingStore struct{ *Store }

// Compact drops the plugin's history up to and including revision.
func (s CompactingStore) Compact(t conformance.T, revision int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	if err := s.Plugin.CompactHistory(ctx, revision); err != nil {
		t.Fatalf("compact history: %v", err)
	}
}

// Descriptor returns the descriptor the host read from the store's plugin
// (conformance.Describer), so that the suite can compare it with the
// backend's capabilities.
func (s *Store) Descriptor() core.BackendDescriptor { return s.Plugin.Descriptor() }
