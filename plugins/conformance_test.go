package plugins_test

import (
	"testing"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/conformance"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/plugins/plugintest"
)

// compactingStore is a plugin store whose memory backend's history the
// test can compact directly (in process), so the suite's compaction
// properties run through the shim too.
type compactingStore struct {
	*plugintest.Store
	mp *memory.Provider
}

func (s compactingStore) Compact(t conformance.T, revision int64) { s.mp.Store().Compact(revision) }

// TestConformanceInProcess runs the suite on the memory backend through the
// plugin shim (server, wire, host client) over go-plugin's in-process gRPC
// connection.
func TestConformanceInProcess(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		Name: "memory through the in-process plugin shim",
		NewStore: func(ct conformance.T) conformance.Store {
			mp := memory.NewProvider(memory.StoreOptions{})
			p, closeConn := plugintest.ConnectInProcess(t, mp, plugintest.Options{})
			ct.Cleanup(func() {
				_ = p.Close()
				closeConn()
			})
			return compactingStore{Store: &plugintest.Store{Plugin: p}, mp: mp}
		},
	})
}

// TestConformancePluginProcess runs the suite on the memory backend as a
// real plugin process (metaplane-backend-memory), one process per store.
// (The compaction properties are skipped: the process's history cannot be
// compacted from outside.)
func TestConformancePluginProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a plugin process per property; skipped with -short")
	}
	bin := testutil.Binary(t, "metaplane-backend-memory")
	conformance.Run(t, plugintest.Harness(bin, plugintest.Options{}))
}
