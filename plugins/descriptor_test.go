package plugins_test

import (
	"testing"

	"github.com/metaplane/metaplane/backends/raft"
	"github.com/metaplane/metaplane/backends/zookeeper"
	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/core"
)

// TestBuiltinDescriptorsMatchTheBackends: the selector's data for the
// built-in backends (config, which the host reads without starting a
// plugin) is what each backend's provider declares.
func TestBuiltinDescriptorsMatchTheBackends(t *testing.T) {
	declared := map[string]core.BackendDescriptor{}
	for _, p := range []core.Provider{&raft.Provider{}, &zookeeper.Provider{}} {
		d := p.Descriptor()
		declared[d.Name] = d
	}
	builtin := config.BuiltinBackends()
	if len(builtin) != len(declared) {
		t.Fatalf("config lists %d built-in backends, the providers %d", len(builtin), len(declared))
	}
	for _, b := range builtin {
		if got := declared[b.Name]; got != b {
			t.Errorf("backend %s: provider declares %+v, config has %+v", b.Name, got, b)
		}
	}
}
