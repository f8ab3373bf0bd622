package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/metaplane/metaplane/core"
)

var etcdDescriptor = core.BackendDescriptor{Name: "etcd", SelectorKey: "etcd.endpoints", Description: "a third-party etcd backend"}

func TestSelectBackend(t *testing.T) {
	builtin := BuiltinBackends()
	withEtcd := append(BuiltinBackends(), etcdDescriptor)
	withMemory := append(BuiltinBackends(), core.BackendDescriptor{Name: "memory"})
	zk, seeds, etcd := KeyZooKeeperAddress, KeySeedNodes, "etcd.endpoints"

	tests := []struct {
		name     string
		present  PresenceSet
		backends []core.BackendDescriptor
		def      string
		// want on success
		backend, by string
		warn        bool
		// want on failure: the problems' keys and a fragment of each message
		errKeys []string
		errHas  []string
	}{
		{name: "zookeeper.address only", present: PresenceSet{zk: KeySet}, backends: builtin, def: "raft",
			backend: "zookeeper", by: zk, warn: true},
		{name: "seed nodes only", present: PresenceSet{seeds: KeySet}, backends: builtin, def: "raft",
			backend: "raft", by: seeds},
		{name: "seed nodes only, default none", present: PresenceSet{seeds: KeySet}, backends: builtin, def: "none",
			backend: "raft", by: seeds},
		{name: "zookeeper only, default none", present: PresenceSet{zk: KeySet}, backends: builtin, def: "none",
			backend: "zookeeper", by: zk, warn: true},
		{name: "both refused", present: PresenceSet{zk: KeySet, seeds: KeySet}, backends: builtin, def: "raft",
			errKeys: []string{seeds}, errHas: []string{"coordinator.seed.nodes (selects raft) and zookeeper.address (selects zookeeper)"}},
		{name: "neither, default raft", present: PresenceSet{}, backends: builtin, def: "raft",
			backend: "raft", by: "metadata.backend.default=raft"},
		{name: "neither, default zookeeper needs the address", present: PresenceSet{}, backends: builtin, def: "zookeeper",
			errKeys: []string{zk}, errHas: []string{"required: metadata.backend.default=zookeeper"}},
		{name: "neither, default none", present: PresenceSet{}, backends: builtin, def: "none",
			errKeys: []string{KeyBackendDefault}, errHas: []string{"one of coordinator.seed.nodes (raft), zookeeper.address (zookeeper)"}},
		{name: "neither, unknown default", present: PresenceSet{}, backends: builtin, def: "consul",
			errKeys: []string{KeyBackendDefault}, errHas: []string{`unknown backend "consul"`}},
		{name: "unknown default refused even with a key set", present: PresenceSet{seeds: KeySet}, backends: builtin, def: "Raft",
			errKeys: []string{KeyBackendDefault}, errHas: []string{`unknown backend "Raft": want one of zookeeper, raft, none`}},
		{name: "zookeeper present but empty", present: PresenceSet{zk: KeyEmpty}, backends: builtin, def: "raft",
			errKeys: []string{zk}, errHas: []string{"set but empty"}},
		{name: "seed nodes present but empty", present: PresenceSet{seeds: KeyEmpty}, backends: builtin, def: "raft",
			errKeys: []string{seeds}, errHas: []string{"set but empty"}},
		{name: "empty plus the other set", present: PresenceSet{seeds: KeyEmpty, zk: KeySet}, backends: builtin, def: "raft",
			errKeys: []string{seeds}, errHas: []string{"set but empty"}},
		{name: "third-party only", present: PresenceSet{etcd: KeySet}, backends: withEtcd, def: "raft",
			backend: "etcd", by: etcd},
		{name: "third-party with seed nodes refused", present: PresenceSet{etcd: KeySet, seeds: KeySet}, backends: withEtcd, def: "raft",
			errKeys: []string{seeds}, errHas: []string{"etcd.endpoints (selects etcd)"}},
		{name: "all three refused", present: PresenceSet{etcd: KeySet, seeds: KeySet, zk: KeySet}, backends: withEtcd, def: "raft",
			errKeys: []string{seeds}, errHas: []string{"coordinator.seed.nodes (selects raft), etcd.endpoints (selects etcd) and zookeeper.address (selects zookeeper)"}},
		{name: "third-party key without its descriptor is ignored", present: PresenceSet{etcd: KeySet}, backends: builtin, def: "raft",
			backend: "raft", by: "metadata.backend.default=raft"},
		{name: "third-party default needs its key", present: PresenceSet{}, backends: withEtcd, def: "etcd",
			errKeys: []string{etcd}, errHas: []string{"required: metadata.backend.default=etcd"}},
		{name: "third-party present but empty", present: PresenceSet{etcd: KeyEmpty}, backends: withEtcd, def: "raft",
			errKeys: []string{etcd}, errHas: []string{"set but empty"}},
		{name: "keyless backend by default", present: PresenceSet{}, backends: withMemory, def: "memory",
			backend: "memory", by: "metadata.backend.default=memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := SelectBackend(tt.present, tt.backends, tt.def)
			if tt.errKeys != nil {
				var ce *Error
				if !errors.As(err, &ce) {
					t.Fatalf("got %+v, %v; want a *Error", sel, err)
				}
				var keys []string
				for i, p := range ce.Problems {
					keys = append(keys, p.Key)
					if i < len(tt.errHas) && !strings.Contains(p.Message, tt.errHas[i]) {
						t.Errorf("problem %d message %q, want it to contain %q", i, p.Message, tt.errHas[i])
					}
				}
				if !reflect.DeepEqual(keys, tt.errKeys) {
					t.Errorf("problem keys %q, want %q", keys, tt.errKeys)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if sel.Backend != tt.backend || sel.SelectedBy != tt.by {
				t.Errorf("got backend %q selected by %q, want %q by %q", sel.Backend, sel.SelectedBy, tt.backend, tt.by)
			}
			if got := len(sel.Warnings) > 0; got != tt.warn {
				t.Errorf("warnings %q, want some: %v", sel.Warnings, tt.warn)
			}
			if tt.warn && !strings.Contains(sel.Warnings[0], "deprecated") {
				t.Errorf("warning %q does not say deprecated", sel.Warnings[0])
			}
		})
	}
}
