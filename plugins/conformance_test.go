package plugins_test

import (
	"testing"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/conformance"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/plugins/plugintest"
)

// TestConformanceInProcess runs the suite on the memory backend through the
// plugin shim (server, wire, host client) over go-plugin's in-process gRPC
// connection.
func TestConformanceInProcess(t *testing.T) {
	conformance.Run(t, plugintest.InProcessHarness(t, func() core.Provider {
		return memory.NewProvider(memory.StoreOptions{})
	}, plugintest.Options{}))
}

// TestConformancePluginProcess runs the suite on the memory backend as a
// real plugin process (metaplane-backend-memory), one process per store.
func TestConformancePluginProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a plugin process per property; skipped with -short")
	}
	bin := testutil.Binary(t, "metaplane-backend-memory")
	conformance.Run(t, plugintest.Harness(bin, plugintest.Options{}))
}
