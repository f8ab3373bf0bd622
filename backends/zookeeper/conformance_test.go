package zookeeper

import (
	"context"
	"testing"
	"time"

	"github.com/metaplane/metaplane/conformance"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/internal/zktest"
	"github.com/metaplane/metaplane/plugins/plugintest"
)

// zkStore is one conformance store: a fresh root on the shared server,
// reached through a session proxy of its own, so that Silence can
// partition one client (conformance.Silencer).
type zkStore struct {
	opts Options
	silencer
}

func newZKStore(t testing.TB) *zkStore {
	o := testOptions(t)
	proxy := zktest.StartSessionProxy(t, o.Address)
	o.Address = proxy.Addr()
	return &zkStore{opts: o, silencer: silencer{proxy}}
}

func (s *zkStore) NewClient(t conformance.T, co conformance.ClientOptions) core.MetadataBackend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := Open(ctx, s.opts, core.ClientOptions{SessionTimeout: co.SessionTimeout, Name: t.Name()})
	if err != nil {
		t.Fatalf("open ZooKeeper client: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// silencer implements conformance.Silencer for a store whose clients reach
// the server through proxy.
type silencer struct{ proxy *zktest.Proxy }

// Silence blackholes c's session at the proxy: its connection stays open
// but carries nothing, and so does every reconnect for the session, as in
// a partition of that client alone; the server hears no heartbeat and
// expires the session after its timeout. At cleanup the proxy cuts the
// session's connections, so that c's Close returns at once.
func (s silencer) Silence(t conformance.T, c core.MetadataBackend) {
	t.Helper()
	id := c.Session().ID
	if id == 0 {
		t.Fatalf("client %p has no session to silence", c)
	}
	s.proxy.SilenceSession(id)
	t.Cleanup(func() { s.proxy.CutSession(id) })
}

func (s *zkStore) ExpireSession(t conformance.T, c core.MetadataBackend) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.(core.SessionExpirer).ExpireSession(ctx); err != nil {
		t.Fatalf("expire session: %v", err)
	}
}

// TestConformance runs the suite directly on the backend against a real
// standalone ZooKeeper server (shared by the package's tests; each
// property gets its own root).
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		Name: "zookeeper",
		NewStore: func(ct conformance.T) conformance.Store {
			return newZKStore(ct.(testing.TB))
		},
	})
}

// pluginStore is a plugin harness's store whose plugin reaches the server
// through a session proxy, so that Silence can partition one of its
// clients although one process holds them all.
type pluginStore struct {
	*plugintest.Store
	silencer
}

// TestConformancePluginProcess runs the suite across a real plugin process
// (metaplane-backend-zookeeper) against the shared server: one plugin
// process per property, each with its own zookeeper.path.root, reaching
// the server through a session proxy of its own.
func TestConformancePluginProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a plugin process per property; skipped with -short")
	}
	srv := zktest.Shared(t)
	bin := testutil.Binary(t, "metaplane-backend-zookeeper")
	conformance.Run(t, conformance.Harness{
		Name: "zookeeper plugin",
		NewStore: func(ct conformance.T) conformance.Store {
			tb := ct.(testing.TB)
			root := zktest.UniqueRoot(tb)
			proxy := zktest.StartSessionProxy(tb, srv.ConnectString())
			h := plugintest.Harness(bin, plugintest.Options{Config: map[string]string{
				"zookeeper.address":                   proxy.Addr(),
				"zookeeper.path.root":                 root,
				"zookeeper.client.session-timeout":    "4s",
				"zookeeper.client.connection-timeout": "10s",
				"zookeeper.client.retry-wait":         "100ms",
			}})
			ps, ok := h.NewStore(ct).(*plugintest.Store)
			if !ok {
				ct.Fatalf("the plugin harness's store is not a *plugintest.Store")
			}
			return pluginStore{ps, silencer{proxy}}
		},
	})
}
