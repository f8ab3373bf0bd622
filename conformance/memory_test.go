package conformance_test

import (
	"context"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/conformance"
	"github.com/metaplane/metaplane/core"
)

// memoryStore adapts a memory.Store to conformance.Store,
// conformance.Compactor and conformance.Silencer.
type memoryStore struct{ s *memory.Store }

func (m memoryStore) NewClient(t conformance.T, opts conformance.ClientOptions) core.MetadataBackend {
	c := m.s.NewClient(core.ClientOptions{SessionTimeout: opts.SessionTimeout, Name: t.Name()})
	t.Cleanup(func() { c.Close() })
	return c
}

func (m memoryStore) ExpireSession(t conformance.T, c core.MetadataBackend) {
	t.Helper()
	if err := c.(core.SessionExpirer).ExpireSession(context.Background()); err != nil {
		t.Fatalf("expire session: %v", err)
	}
}

// Silence stops c's heartbeats (conformance.Silencer): its session then
// really expires after its timeout.
func (m memoryStore) Silence(t conformance.T, c core.MetadataBackend) {
	c.(*memory.Backend).PauseHeartbeats()
}

func (m memoryStore) Compact(t conformance.T, revision int64) { m.s.Compact(revision) }

var memoryHarness = conformance.Harness{
	Name: "memory",
	NewStore: func(t conformance.T) conformance.Store {
		s := memory.NewStore(memory.StoreOptions{SessionTimeout: 10 * time.Second, MaxValueSize: 64 << 10})
		t.Cleanup(func() { s.Close() })
		return memoryStore{s}
	},
}

// TestMemory runs the suite on the reference backend, so that
// `go test ./conformance/... -v` lists every property.
func TestMemory(t *testing.T) { conformance.Run(t, memoryHarness) }
