package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/metaplane/metaplane/core"
)

// The selector keys of the built-in backends, and the key of the default.
const (
	KeyZooKeeperAddress = "zookeeper.address"
	KeySeedNodes        = "coordinator.seed.nodes"
	KeyBackendDefault   = "metadata.backend.default"
)

// ZooKeeperDescriptor describes the built-in ZooKeeper backend: selected by
// zookeeper.address, deprecated.
var ZooKeeperDescriptor = core.BackendDescriptor{
	Name:        BackendZooKeeper,
	SelectorKey: KeyZooKeeperAddress,
	Description: "an external ZooKeeper ensemble, with the original znode layout",
	Deprecated:  "the ZooKeeper backend is deprecated and will be removed in a later major release: migrate to the Raft backend (see docs/zookeeper.md)",
}

// RaftDescriptor describes the built-in Raft backend: selected by
// coordinator.seed.nodes, and the shipped default.
var RaftDescriptor = core.BackendDescriptor{
	Name:          BackendRaft,
	SelectorKey:   KeySeedNodes,
	Description:   "embedded Raft quorum of the coordinators (Dragonboat, Pebble state machine)",
	TabletServers: core.TabletServersThroughCoordinator,
}

// BuiltinBackends returns the descriptors of the backends that take part in
// selection out of the box: zookeeper and raft. The caller owns the slice.
func BuiltinBackends() []core.BackendDescriptor {
	return []core.BackendDescriptor{ZooKeeperDescriptor, RaftDescriptor}
}

// KeyState is what a configuration source did with a key.
type KeyState int

const (
	// KeyUnset: no source set the key.
	KeyUnset KeyState = iota
	// KeySet: the key was set to a non-empty value.
	KeySet
	// KeyEmpty: the key was set, to an empty value ("", an empty list, a
	// YAML null). For a selector key this is an error, not "unset".
	KeyEmpty
)

// PresenceSet records which keys the configuration sources set, and
// whether to an empty value. A missing key is KeyUnset.
type PresenceSet map[string]KeyState

// Selection is the outcome of backend selection.
type Selection struct {
	// Backend is the selected backend's name ("raft", "zookeeper", a
	// plugin's name).
	Backend string
	// SelectedBy is what selected it: the selector key that was set
	// ("zookeeper.address"), or the default ("metadata.backend.default=raft").
	SelectedBy string
	// Descriptor is the selected backend's descriptor.
	Descriptor core.BackendDescriptor
	// Warnings are to be shown at start (the deprecation of ZooKeeper).
	Warnings []string
}

// SelectBackend applies the exclusive selection rule. It is a pure
// function; backends is not retained.
//
//   - A backend's selector key present but empty is an error naming it.
//   - Exactly one backend's selector key set: that backend.
//   - Two or more set: refused, naming every key set.
//   - def not a backend's name nor "none": an error naming
//     metadata.backend.default, whether or not a selector key is set.
//   - None set: def (metadata.backend.default). "raft" is a single-voter
//     embedded quorum on loopback; "none" is refused, naming the keys that
//     would select a backend; any other backend name needs that backend's
//     selector key, which is unset, so it is refused naming that key (a
//     backend without a selector key, such as memory, needs none).
//
// A selected backend's Deprecated text becomes a warning. Errors: a
// *Error listing every problem.
func SelectBackend(present PresenceSet, backends []core.BackendDescriptor, def string) (Selection, error) {
	var probs Problems
	known := def == BackendNone
	for _, b := range backends {
		known = known || b.Name == def
	}
	if !known {
		names := []string{}
		for _, b := range backends {
			names = append(names, b.Name)
		}
		names = append(names, BackendNone)
		probs.Add(KeyBackendDefault, fmt.Sprintf("unknown backend %q: want one of %s", def, strings.Join(names, ", ")))
	}
	var set []core.BackendDescriptor
	for _, b := range backends {
		if b.SelectorKey == "" {
			continue
		}
		switch present[b.SelectorKey] {
		case KeyEmpty:
			probs.Add(b.SelectorKey, fmt.Sprintf("set but empty, which is not the same as unset: remove the key, or give it a value to select the %s backend", b.Name))
		case KeySet:
			set = append(set, b)
		}
	}
	sort.Slice(set, func(i, j int) bool { return set[i].SelectorKey < set[j].SelectorKey })
	if len(set) > 1 {
		parts := make([]string, len(set))
		for i, b := range set {
			parts[i] = fmt.Sprintf("%s (selects %s)", b.SelectorKey, b.Name)
		}
		quant := "both"
		if len(set) > 2 {
			quant = "all of"
		}
		probs.Add(set[0].SelectorKey, fmt.Sprintf("backend selection is exclusive, but %s %s are set: keep exactly one", quant, joinAnd(parts)))
	}
	if err := probs.Err(); err != nil {
		return Selection{}, err
	}
	if len(set) == 1 {
		return selected(set[0], set[0].SelectorKey), nil
	}

	by := KeyBackendDefault + "=" + def
	if def == BackendNone {
		probs.Add(KeyBackendDefault, fmt.Sprintf("none, and no backend is configured: set %s", selectorChoices(backends)))
		return Selection{}, probs.Err()
	}
	for _, b := range backends {
		if b.Name != def {
			continue
		}
		if b.SelectorKey != "" && b.Name != BackendRaft {
			probs.Add(b.SelectorKey, fmt.Sprintf("required: %s selects the %s backend", by, b.Name))
			return Selection{}, probs.Err()
		}
		return selected(b, by), nil
	}
	return Selection{}, probs.Err() // not reached: def was checked above
}

func selected(b core.BackendDescriptor, by string) Selection {
	s := Selection{Backend: b.Name, SelectedBy: by, Descriptor: b}
	if b.Deprecated != "" {
		s.Warnings = []string{b.Deprecated}
	}
	return s
}

func selectorChoices(backends []core.BackendDescriptor) string {
	var parts []string
	for _, b := range backends {
		if b.SelectorKey != "" {
			parts = append(parts, fmt.Sprintf("%s (%s)", b.SelectorKey, b.Name))
		}
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "a backend's selector key"
	}
	return "one of " + strings.Join(parts, ", ") + ", or choose a backend with " + KeyBackendDefault
}

func joinAnd(parts []string) string {
	if len(parts) <= 2 {
		return strings.Join(parts, " and ")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}
