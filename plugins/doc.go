// Package plugins is metaplane's out-of-process backend boundary: backends
// run as separate processes (metaplane-backend-<name>) and are reached over
// go-plugin's gRPC transport, service metaplane.v1.Backend
// (proto/metaplane/v1).
//
// Three layers, as go-plugin's examples have them: core knows nothing of
// gRPC; this package translates (errors.go is the one error translation
// table, convert.go the pure type conversions, server.go the plugin side,
// client.go the host side); each plugin main only builds its provider and
// calls Serve:
//
//	func main() { plugins.Serve(memory.NewProvider(memory.StoreOptions{})) }
//
// The wire is versioned from the start: Handshake's magic cookie never
// changes, PluginSets maps protocol version 1 to the metaplane.v1 service,
// and a Capabilities message (with the optional interfaces a backend
// implements) travels with every new client.
//
// # Host side
//
// The host discovers the third-party plugins (DiscoverThirdParty, which
// runs each binary in describe mode to learn its selector key without
// starting it), hands their descriptors to configuration loading, then
// launches the selected backend:
//
//	extra, _ := plugins.DiscoverThirdParty(ctx, dir)
//	cfg, err := config.Load(config.LoadOptions{..., ExtraBackends: extra})
//	p, err := plugins.Launch(ctx, plugins.LaunchOptions{
//		Name:   cfg.Selected.Backend,
//		Dir:    cfg.Metadata.Backend.PluginDir,
//		SHA256: cfg.Metadata.Backend.PluginSHA256,
//		Config: cfg.PluginSettings(),
//		Logger: logger,
//	})
//	backend, err := p.NewClient(ctx, core.ClientOptions{Name: coordinatorID})
//	...
//	select {
//	case <-p.Done(): // the host gave up on the plugin: exit with p.Err()
//	...
//	}
//
// A Plugin watches its process: when it dies, calls fail with
// core.ErrUnavailable, leaderships are lost, sessions are reported expired,
// and the plugin is restarted with backoff (clients reconnect with new
// sessions) until it fails too often; then Done is closed and Err says why.
// A plugin never outlives its host (parent-death signal plus a parent watch
// in Serve). docs/plugins.md describes the lifecycle for operators and
// docs/writing-a-backend.md the kit for backend authors.
//
// Package plugintest runs a backend across the boundary as a conformance
// harness, in a real process or in process.
package plugins
