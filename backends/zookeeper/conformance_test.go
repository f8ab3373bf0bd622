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

// zkStore is one conformance store: a fresh root on the shared server.
type zkStore struct {
	opts Options
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
			return &zkStore{opts: testOptions(tt)}
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
