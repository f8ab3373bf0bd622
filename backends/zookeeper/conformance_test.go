package zookeeper

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/conformance"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/internal/zktest"
	"github.com/metaplane/metaplane/plugins/plugintest"
)

// zkStore is one conformance store: a fresh root on the shared server.
// Each client reaches the server through a proxy of its own, so that
// Silence can partition one client (conformance.Silencer).
type zkStore struct {
	opts Options

	mu      sync.Mutex
	proxies map[core.MetadataBackend]*zktest.Proxy
}

func (s *zkStore) NewClient(t conformance.T, co conformance.ClientOptions) core.MetadataBackend {
	t.Helper()
	proxy := zktest.StartProxy(t.(testing.TB), s.opts.Address)
	o := s.opts
	o.Address = proxy.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := Open(ctx, o, core.ClientOptions{SessionTimeout: co.SessionTimeout, Name: t.Name()})
	if err != nil {
		t.Fatalf("open ZooKeeper client: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	s.mu.Lock()
	s.proxies[b] = proxy
	s.mu.Unlock()
	return b
}

// Silence blackholes c's proxy: c's connection stays open but carries
// nothing, as in a partition, so the server hears no heartbeat and
// expires c's session after its timeout. At cleanup the proxy refuses
// c's connections, so that c's Close returns at once.
func (s *zkStore) Silence(t conformance.T, c core.MetadataBackend) {
	t.Helper()
	s.mu.Lock()
	proxy := s.proxies[c]
	s.mu.Unlock()
	if proxy == nil {
		t.Fatalf("client %p was not opened by this store", c)
	}
	proxy.SetMode(zktest.Blackhole)
	t.Cleanup(proxy.Cut)
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
			tt := ct.(testing.TB)
			return &zkStore{opts: testOptions(tt), proxies: map[core.MetadataBackend]*zktest.Proxy{}}
		},
	})
}

// TestConformancePluginProcess runs the suite across a real plugin process
// (metaplane-backend-zookeeper) against the shared server: one plugin
// process per property, each with its own zookeeper.path.root.
func TestConformancePluginProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a plugin process per property; skipped with -short")
	}
	srv := zktest.Shared(t)
	bin := testutil.Binary(t, "metaplane-backend-zookeeper")
	conformance.Run(t, conformance.Harness{
		Name: "zookeeper plugin",
		NewStore: func(ct conformance.T) conformance.Store {
			root := zktest.UniqueRoot(ct.(testing.TB))
			h := plugintest.Harness(bin, plugintest.Options{Config: map[string]string{
				"zookeeper.address":                   srv.ConnectString(),
				"zookeeper.path.root":                 root,
				"zookeeper.client.session-timeout":    "4s",
				"zookeeper.client.connection-timeout": "10s",
				"zookeeper.client.retry-wait":         "100ms",
			}})
			return h.NewStore(ct)
		},
	})
}
