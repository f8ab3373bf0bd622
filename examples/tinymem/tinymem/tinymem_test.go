package tinymem_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"example.com/metaplane-tinymem/tinymem"
	"github.com/metaplane/metaplane/conformance"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/plugins/plugintest"
)

var config = map[string]string{"tinymem.max-nodes": "100000"}

// store is the direct harness's store: one started provider per store.
type store struct{ p *tinymem.Provider }

func (s store) NewClient(t conformance.T, opts conformance.ClientOptions) core.MetadataBackend {
	c, err := s.p.NewClient(context.Background(), core.ClientOptions{SessionTimeout: opts.SessionTimeout})
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (s store) ExpireSession(t conformance.T, c core.MetadataBackend) {
	if err := c.(core.SessionExpirer).ExpireSession(context.Background()); err != nil {
		t.Fatalf("expire: %v", err)
	}
}

// Compact and Descriptor let the suite run the compaction and descriptor
// properties too.
func (s store) Compact(t conformance.T, revision int64) {
	if err := s.p.CompactHistory(context.Background(), revision); err != nil {
		t.Fatalf("compact: %v", err)
	}
}

func (s store) Descriptor() core.BackendDescriptor { return s.p.Descriptor() }

// Direct: the suite against the provider in this process (fast, debuggable).
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		Name: "tinymem",
		NewStore: func(t conformance.T) conformance.Store {
			p := tinymem.NewProvider()
			if err := p.Start(context.Background(), config); err != nil {
				t.Fatalf("start: %v", err)
			}
			t.Cleanup(func() { p.Close() })
			return store{p}
		},
	})
}

// Across the plugin boundary: every store is a fresh plugin process.
func TestConformancePlugin(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "metaplane-backend-tinymem")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/metaplane-backend-tinymem").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	conformance.Run(t, plugintest.Harness(bin, plugintest.Options{Config: config}))
}
