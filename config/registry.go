package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/metaplane/metaplane/core"
)

// Keys returns every configuration key the loader knows, sorted.
func Keys() []string {
	out := make([]string, len(keyList))
	for i, ki := range keyList {
		out[i] = ki.key
	}
	return out
}

type keyInfo struct {
	key   string
	index []int
	typ   reflect.Type
}

var (
	keyList     []keyInfo          // sorted by key
	keyIndex    map[string]keyInfo // key -> info
	keySections map[string]bool    // every proper prefix of a key ("coordinator.raft")
)

func init() {
	keyIndex = map[string]keyInfo{}
	keySections = map[string]bool{}
	collectKeys(reflect.TypeOf(Config{}), "", nil)
	sort.Slice(keyList, func(i, j int) bool { return keyList[i].key < keyList[j].key })
	for _, ki := range keyList {
		keyIndex[ki.key] = ki
		segs := strings.Split(ki.key, ".")
		for i := 1; i < len(segs); i++ {
			keySections[strings.Join(segs[:i], ".")] = true
		}
	}
}

var durationType = reflect.TypeOf(time.Duration(0))

func collectKeys(t reflect.Type, prefix string, index []int) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("koanf")
		if tag == "" || tag == "-" {
			continue
		}
		key := tag
		if prefix != "" {
			key = prefix + "." + tag
		}
		idx := append(append([]int(nil), index...), i)
		if f.Type.Kind() == reflect.Struct {
			collectKeys(f.Type, key, idx)
			continue
		}
		keyList = append(keyList, keyInfo{key: key, index: idx, typ: f.Type})
	}
}

func isKnownKey(key string) bool { _, ok := keyIndex[key]; return ok }

func firstSegment(key string) string {
	s, _, _ := strings.Cut(key, ".")
	return s
}

// extraSet is the set of key prefixes of third-party backends.
type extraSet struct {
	keys     map[string]bool // selector keys
	prefixes map[string]bool // their first segments
	any      bool            // accept every key outside the built-in sections
	// pluginDir is the plugin directory the sources name ("" for the
	// default), for the hint on an unknown key outside the built-in
	// sections.
	pluginDir string
}

// PluginBinaryPrefix is the file name prefix of backend plugin binaries in
// the plugin directory (metadata.backend.plugin.dir): the plugin of
// backend NAME is PluginBinaryPrefix+NAME.
const PluginBinaryPrefix = "metaplane-backend-"

// unknownKey is the problem text for a key that is neither known nor
// accepted.
func (e extraSet) unknownKey(key string) string {
	return "unknown key" + suggest(key) + e.pluginHint(key)
}

// pluginHint is "" or, for a key outside every built-in section (it may be
// a third-party backend's whose plugin was not found), a hint saying where
// plugins are discovered.
func (e extraSet) pluginHint(key string) string {
	if seg := firstSegment(key); keySections[seg] || isKnownKey(seg) || e.any {
		return ""
	}
	dir := "the plugin directory (" + keyPluginDir + "; default: the directory of the metaplane executable)"
	if e.pluginDir != "" {
		dir = "the plugin directory " + e.pluginDir + " (" + keyPluginDir + ")"
	}
	return "; if it belongs to a third-party backend, no plugin binary " + PluginBinaryPrefix + "<name> in " + dir + " declares it (or a key of its section) as its selector key"
}

func (e extraSet) accepts(key string) bool {
	if isKnownKey(key) {
		return false
	}
	if e.any {
		return !keySections[firstSegment(key)] && !isKnownKey(firstSegment(key))
	}
	return e.keys[key] || e.prefixes[firstSegment(key)]
}

func extraPrefixes(ds []core.BackendDescriptor) (extraSet, error) {
	e := extraSet{keys: map[string]bool{}, prefixes: map[string]bool{}}
	for _, d := range ds {
		if d.SelectorKey == "" {
			continue
		}
		seg := firstSegment(d.SelectorKey)
		if keySections[seg] || isKnownKey(seg) {
			return e, fmt.Errorf("config: backend %q: selector key %q lies under the built-in section %q; a third-party backend needs a key prefix of its own", d.Name, d.SelectorKey, seg)
		}
		e.keys[d.SelectorKey] = true
		e.prefixes[seg] = true
	}
	return e, nil
}

// suggest returns " (did you mean K?)" for the known key closest to key, or
// "" when none is close.
func suggest(key string) string {
	best, bestD := "", 4
	for _, ki := range keyList {
		d := editDistance(key, ki.key)
		if d < bestD || (d == bestD && ki.key < best) {
			best, bestD = ki.key, d
		}
	}
	if best == "" || best == key {
		return ""
	}
	return " (did you mean " + best + "?)"
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
