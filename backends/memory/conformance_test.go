package memory_test

import (
	"context"
	"testing"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/conformance"
	"github.com/metaplane/metaplane/core"
)

// harnessStore adapts a memory.Store to conformance.Store (and
// conformance.Compactor and conformance.Silencer, so the compaction and
// session-timeout properties run too).
type harnessStore struct{ s *memory.Store }

func (h harnessStore) NewClient(t conformance.T, opts conformance.ClientOptions) core.MetadataBackend {
	c := h.s.NewClient(core.ClientOptions{SessionTimeout: opts.SessionTimeout, Name: t.Name()})
	t.Cleanup(func() { c.Close() })
	return c
}

func (h harnessStore) ExpireSession(t conformance.T, c core.MetadataBackend) {
	t.Helper()
	if err := c.(*memory.Backend).ExpireSession(context.Background()); err != nil {
		t.Fatalf("expire session: %v", err)
	}
}

// Silence stops c's heartbeats (conformance.Silencer): its session then
// really expires after its timeout.
func (h harnessStore) Silence(t conformance.T, c core.MetadataBackend) {
	c.(*memory.Backend).PauseHeartbeats()
}

func (h harnessStore) Compact(t conformance.T, revision int64) { h.s.Compact(revision) }

// TestConformance holds the memory backend, with its default options, to
// every property of the suite.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		Name: "memory",
		NewStore: func(t conformance.T) conformance.Store {
			s := memory.NewStore(memory.StoreOptions{})
			t.Cleanup(func() { s.Close() })
			return harnessStore{s}
		},
	})
}
