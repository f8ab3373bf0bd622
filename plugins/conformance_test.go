package plugins_test

import (
	"context"
	"testing"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/conformance"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/plugins/plugintest"
)

// compactingProvider is the memory provider with the CompactHistory test
// hook, so the suite's compaction properties run through the shim too.
type compactingProvider struct{ *memory.Provider }

var _ core.HistoryCompactor = compactingProvider{}

func (p compactingProvider) CompactHistory(ctx context.Context, revision int64) error {
	p.Store().Compact(revision)
	return nil
}

// TestConformanceInProcess runs the suite on the memory backend through the
// plugin shim (server, wire, host client) over go-plugin's in-process gRPC
// connection.
func TestConformanceInProcess(t *testing.T) {
	conformance.Run(t, plugintest.InProcessHarness(t, func() core.Provider {
		return compactingProvider{memory.NewProvider(memory.StoreOptions{})}
	}, plugintest.Options{}))
}

// TestConformancePluginProcess runs the suite on the memory backend as a
// real plugin process (metaplane-backend-memory), one process per store.
// (The compaction properties run only if the memory provider implements
// core.HistoryCompactor.)
func TestConformancePluginProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a plugin process per property; skipped with -short")
	}
	bin := testutil.Binary(t, "metaplane-backend-memory")
	conformance.Run(t, plugintest.Harness(bin, plugintest.Options{}))
}

// TestConformanceInProcessHostAnswers runs the properties that the host's
// own client can answer (an ended context, calls after Close) through
// Plugin.NewClient, the coordinator's client, so that the host's answers
// are held to the contract too; the other runs use the conformance client,
// which passes those calls to the plugin.
func TestConformanceInProcessHostAnswers(t *testing.T) {
	h := plugintest.InProcessHarness(t, func() core.Provider {
		return memory.NewProvider(memory.StoreOptions{})
	}, plugintest.Options{HostAnswers: true})
	results, err := conformance.RunStandalone(h, conformance.StandaloneOptions{Run: conformance.HostAnswerable})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) == 0 {
		t.Fatalf("no property matches %q", conformance.HostAnswerable)
	}
	for _, r := range results {
		if r.Status != conformance.Passed {
			t.Errorf("%s %s: %v", r.Name, r.Status, r.Messages)
		}
	}
}
