package core

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
)

// EnvPrefix starts every environment variable that sets a configuration key.
// A key maps to its variable by upper-casing it, writing each "-" as "__"
// and each "." as "_", after the prefix:
// coordinator.raft.first-election.timeout is
// METAPLANE_COORDINATOR_RAFT_FIRST__ELECTION_TIMEOUT. The mapping is
// reversible because keys never contain "_" (see EnvName, KeyForEnv).
const EnvPrefix = "METAPLANE_"

// reservedEnvSegments are the first key segments of METAPLANE_* variables
// that are not configuration: METAPLANE_CONFIG (the default file),
// METAPLANE_BIN_DIR and METAPLANE_SOAK (tests), METAPLANE_BACKEND_PLUGIN
// (the plugin handshake cookie), METAPLANE_JAVA and METAPLANE_ZK_* (the
// test ZooKeeper server), and METAPLANE_TEST_*, METAPLANE_PLUGIN_*,
// METAPLANE_LOG_*. LoadConfig ignores them instead of refusing them as
// unknown keys. No configuration key may start with one of these segments.
var reservedEnvSegments = map[string]bool{
	"bin": true, "soak": true, "config": true, "test": true, "plugin": true, "log": true,
	"backend": true, "java": true, "zk": true,
}

// IsReservedEnv reports whether an environment variable starting with
// EnvPrefix is reserved for something other than configuration, so that
// LoadConfig ignores it (see LoadOptions.Env).
func IsReservedEnv(name string) bool {
	key, ok := KeyForEnv(name)
	return ok && reservedEnvSegments[firstSegment(key)]
}

// LoadOptions are the sources LoadConfig reads, lowest precedence first
// after the defaults: File, then Env, then Overrides.
type LoadOptions struct {
	// File is a YAML file of keys, flat ("coordinator.raft.port: 9124"),
	// nested, or both mixed. Empty: no file.
	File string
	// Env is the environment as os.Environ returns it; only variables
	// starting with EnvPrefix are read. Nil: no environment. Every
	// METAPLANE_* variable must map to a known key (or a registered
	// third-party prefix); reserved ones (see IsReservedEnv) are ignored.
	Env []string
	// Overrides are "key=value" settings (the -D flags), applied last in
	// order, so a later one wins.
	Overrides []string
	// ExtraBackends are third-party backends taking part in selection.
	// Keys equal to a descriptor's SelectorKey or under its first segment
	// are accepted into Config.Extra. A descriptor whose first segment is a
	// built-in section (coordinator, zookeeper, ...) is refused.
	ExtraBackends []BackendDescriptor
	// DiscoverBackends, when set, is asked for the third-party backends
	// found in the plugin directory (the value of
	// metadata.backend.plugin.dir from the sources above, "" for the
	// default), so their selector keys take part in loading and selection
	// like ExtraBackends. It is a hook because core does not launch
	// plugins; the binary passes plugins.Discover. An error is reported as
	// a problem of metadata.backend.plugin.dir.
	DiscoverBackends func(pluginDir string) ([]BackendDescriptor, error)
	// Observer says the process is a tablet server (an observer, never a
	// Raft voter): the rules that only concern a voter (the voter list
	// required with several seed nodes, node.id among the voters) are
	// skipped.
	Observer bool
}

// LoadConfig builds a Config from the defaults, then opts.File, then
// opts.Env, then opts.Overrides (a later source wins per key), validates it
// and selects the backend (Config.Selected). The caller owns the result.
//
// Errors: a *ConfigError listing every problem found (unknown keys, bad
// values, inconsistent combinations, a refused selection, an unreadable
// file), each naming its key, in a stable order; or a plain error for a
// programming mistake in opts.ExtraBackends. On error the Config is nil.
func LoadConfig(opts LoadOptions) (*Config, error) {
	var probs Problems
	merged := map[string]any{}

	if opts.File != "" {
		k := koanf.New(".")
		if err := k.Load(file.Provider(opts.File), yaml.Parser()); err != nil {
			probs.Add("", fmt.Sprintf("config file %s: %v", opts.File, shortErr(err)))
		} else {
			flat := map[string]any{}
			flattenInto(k.Raw(), "", flat, &probs)
			for key, v := range flat {
				merged[key] = v
			}
		}
	}

	if opts.DiscoverBackends != nil {
		found, err := opts.DiscoverBackends(rawPluginDir(merged, opts))
		if err != nil {
			probs.Add(keyPluginDir, fmt.Sprintf("discovering backend plugins: %v", err))
		}
		opts.ExtraBackends = append(append([]BackendDescriptor(nil), opts.ExtraBackends...), found...)
	}
	extras, err := extraPrefixes(opts.ExtraBackends)
	if err != nil {
		return nil, err
	}

	if opts.Env != nil {
		k := koanf.New(".")
		environ := opts.Env
		err := k.Load(env.Provider("", env.Opt{
			Prefix:      EnvPrefix,
			EnvironFunc: func() []string { return environ },
			TransformFunc: func(name, value string) (string, any) {
				key, ok := KeyForEnv(name)
				if !ok {
					probs.Add(name, "environment variable does not map to a configuration key")
					return "", nil
				}
				if reservedEnvSegments[firstSegment(key)] {
					return "", nil
				}
				if !isKnownKey(key) && !extras.accepts(key) {
					probs.Add(name, fmt.Sprintf("environment variable names unknown key %s%s", key, suggest(key)))
					return "", nil
				}
				return key, value
			},
		}), nil)
		if err != nil {
			probs.Add("", fmt.Sprintf("environment: %v", err))
		}
		for key, v := range k.Raw() {
			merged[key] = v
		}
	}

	if len(opts.Overrides) > 0 {
		// Applied one by one so that a later -D wins over an earlier one.
		k := koanf.New("\x00")
		for _, o := range opts.Overrides {
			key, value, err := ParseOverride(o)
			if err != nil {
				probs.Add(o, err.Error())
				continue
			}
			if err := k.Load(confmap.Provider(map[string]any{key: value}, ""), nil); err != nil {
				probs.Add(key, err.Error())
			}
		}
		for key, v := range k.Raw() {
			merged[key] = v
		}
	}

	cfg, present := decodeFlat(merged, extras, &probs)
	cfg.validate(&probs, opts.Observer)
	backends := append(BuiltinBackends(), opts.ExtraBackends...)
	sel, err := SelectBackend(present, backends, cfg.Metadata.Backend.Default)
	if err != nil {
		var ce *ConfigError
		if errors.As(err, &ce) {
			probs = append(probs, ce.Problems...)
		} else {
			probs.Add(KeyBackendDefault, err.Error())
		}
	}
	if len(probs) > 0 {
		return nil, probs.Err()
	}
	cfg.Selected = sel
	return cfg, nil
}

const keyPluginDir = "metadata.backend.plugin.dir"

// rawPluginDir returns the plugin directory the sources name, before
// decoding: the last -D override, else the environment, else the file's
// value (already in merged), else "".
func rawPluginDir(merged map[string]any, opts LoadOptions) string {
	dir := ""
	if v, ok := merged[keyPluginDir]; ok {
		dir = fmt.Sprint(v)
	}
	if opts.Env != nil {
		want := EnvName(keyPluginDir)
		for _, kv := range opts.Env {
			if name, value, ok := strings.Cut(kv, "="); ok && name == want {
				dir = value
			}
		}
	}
	for _, o := range opts.Overrides {
		if key, value, err := ParseOverride(o); err == nil && key == keyPluginDir {
			dir = value
		}
	}
	return dir
}

// ParseOverride splits a -D setting "key=value" (spaces around the key are
// trimmed; the value is kept as given). Errors name the malformed setting.
func ParseOverride(s string) (key, value string, err error) {
	k, v, ok := strings.Cut(s, "=")
	k = strings.TrimSpace(k)
	if !ok || k == "" {
		return "", "", fmt.Errorf("malformed setting %q: want key=value", s)
	}
	return k, v, nil
}

// ConfigFromFlat builds a Config from a map of keys to string values, as
// (*Config).Flatten produces, on top of the defaults, and validates it. It
// is how a plugin process receives the host's configuration. Unknown keys
// under a built-in section are problems; other unknown keys (third-party
// backends' settings, which the host has accepted) go to Extra. It does not
// select a backend: the plugin is the selection. Errors: a *ConfigError.
// The caller owns the result; m is not retained.
func ConfigFromFlat(m map[string]string) (*Config, error) {
	var probs Problems
	merged := make(map[string]any, len(m))
	for k, v := range m {
		merged[k] = v
	}
	cfg, _ := decodeFlat(merged, extraSet{any: true}, &probs)
	cfg.validate(&probs, false)
	if len(probs) > 0 {
		return nil, probs.Err()
	}
	return cfg, nil
}

// Flatten returns every key whose value is not empty, with its value as a
// string in the syntax the loader accepts (lists joined with ",",
// durations like "500ms", sizes like "8mb"), plus every Extra setting.
// ConfigFromFlat(c.Flatten()) gives back an equal Config (except Selected).
// The caller owns the map.
func (c *Config) Flatten() map[string]string {
	out := map[string]string{}
	v := reflect.ValueOf(c).Elem()
	for _, ki := range keyList {
		s := formatValue(v.FieldByIndex(ki.index))
		if s != "" {
			out[ki.key] = s
		}
	}
	for k, s := range c.Extra {
		out[k] = s
	}
	return out
}

// Keys returns every configuration key the loader knows, sorted.
func Keys() []string {
	out := make([]string, len(keyList))
	for i, ki := range keyList {
		out[i] = ki.key
	}
	return out
}

// EnvName returns the environment variable that sets key (see EnvPrefix).
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(strings.ReplaceAll(key, "-", "__"), ".", "_"))
}

// KeyForEnv returns the key an environment variable sets: the inverse of
// EnvName. ok is false when name does not start with EnvPrefix or does not
// spell a well-formed key (empty segment, stray "_").
func KeyForEnv(name string) (key string, ok bool) {
	rest, found := strings.CutPrefix(name, EnvPrefix)
	if !found || rest == "" {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		switch {
		case c == '_' && i+1 < len(rest) && rest[i+1] == '_':
			b.WriteByte('-')
			i++
		case c == '_':
			b.WriteByte('.')
		case c >= 'A' && c <= 'Z':
			b.WriteByte(c + ('a' - 'A'))
		case c >= '0' && c <= '9':
			b.WriteByte(c)
		default:
			return "", false
		}
	}
	key = b.String()
	for _, seg := range strings.Split(key, ".") {
		if seg == "" || strings.HasPrefix(seg, "-") || strings.HasSuffix(seg, "-") {
			return "", false
		}
	}
	return key, true
}

// ---------------------------------------------------------------------------
// The key registry, built once from Config's koanf tags.

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

func extraPrefixes(ds []BackendDescriptor) (extraSet, error) {
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

// flattenInto flattens a parsed YAML map into dotted keys, so flat and
// nested forms merge; a key given twice (once flat, once nested) is a
// problem, since which one wins would be arbitrary.
func flattenInto(m map[string]any, prefix string, out map[string]any, probs *Problems) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		full := k
		if prefix != "" {
			full = prefix + "." + k
		}
		if sub, ok := m[k].(map[string]any); ok && len(sub) > 0 {
			flattenInto(sub, full, out, probs)
			continue
		}
		if _, dup := out[full]; dup {
			probs.Add(full, "set twice in the file (flat and nested forms)")
			continue
		}
		out[full] = m[k]
	}
}

// decodeFlat applies merged (flat keys) onto the defaults, strictly.
func decodeFlat(merged map[string]any, extras extraSet, probs *Problems) (*Config, PresenceSet) {
	cfg := DefaultConfig()
	present := PresenceSet{}
	keys := make([]string, 0, len(merged))
	for k := range merged {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	root := reflect.ValueOf(cfg).Elem()
	for _, key := range keys {
		val := merged[key]
		if m, ok := val.(map[string]any); ok && len(m) == 0 && (keySections[key] || extras.accepts(key+".x")) {
			continue // an empty section sets nothing
		}
		if ki, ok := keyIndex[key]; ok {
			present[key] = stateOf(val)
			if err := decodeLeaf(root.FieldByIndex(ki.index), val); err != nil {
				probs.Add(key, err.Error())
			}
			continue
		}
		if extras.accepts(key) {
			present[key] = stateOf(val)
			s, err := rawString(val)
			if err != nil {
				probs.Add(key, err.Error())
				continue
			}
			if cfg.Extra == nil {
				cfg.Extra = map[string]string{}
			}
			cfg.Extra[key] = s
			continue
		}
		if keySections[key] {
			probs.Add(key, "is a section, not a key; set the keys under it"+suggest(key))
			continue
		}
		probs.Add(key, "unknown key"+suggest(key))
	}
	return cfg, present
}

// stateOf says whether a value counts as set or as present but empty.
func stateOf(v any) KeyState {
	switch x := v.(type) {
	case nil:
		return KeyEmpty
	case string:
		for _, part := range strings.Split(x, ",") {
			if strings.TrimSpace(part) != "" {
				return KeySet
			}
		}
		return KeyEmpty
	case []any:
		for _, e := range x {
			if stateOf(e) == KeySet {
				return KeySet
			}
		}
		return KeyEmpty
	case map[string]any:
		if len(x) == 0 {
			return KeyEmpty
		}
	}
	return KeySet
}

func rawString(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			s, err := rawString(e)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	case map[string]any:
		return "", errors.New("want a value or a list, got a map")
	default:
		return fmt.Sprint(x), nil
	}
}

// valueError is a problem with a value, reported as is.
type valueError struct{ msg string }

func (e *valueError) Error() string { return e.msg }

func badValue(format string, args ...any) error {
	return &valueError{fmt.Sprintf(format, args...)}
}

// decodeLeaf decodes one value into one field with mapstructure, through
// strict hooks (no weak typing: "abc" is not 0, 500 is not 500ns).
func decodeLeaf(field reflect.Value, val any) error {
	if val == nil {
		field.Set(reflect.Zero(field.Type()))
		return nil
	}
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		DecodeHook:  mapstructure.DecodeHookFuncType(strictHook),
		ErrorUnused: true,
		Result:      field.Addr().Interface(),
	})
	if err != nil {
		return err
	}
	if err := dec.Decode(val); err != nil {
		var ve *valueError
		if errors.As(err, &ve) {
			return ve
		}
		var de *mapstructure.DecodeError
		if errors.As(err, &de) && de.Unwrap() != nil {
			return badValue("%v", de.Unwrap())
		}
		return err
	}
	return nil
}

var (
	sizeType        = reflect.TypeOf(Size(0))
	stringSliceType = reflect.TypeOf([]string(nil))
)

// strictHook converts a YAML, environment or -D value to the field's type,
// with errors that say what was wrong and what is wanted. It plays the part
// of koanf's duration and text-unmarshaler hooks, stricter.
func strictHook(from, to reflect.Type, data any) (any, error) {
	switch {
	case to == durationType:
		s, ok := data.(string)
		if !ok {
			if _, isDur := data.(time.Duration); isDur {
				return data, nil
			}
			return nil, badValue("invalid duration %v: a duration needs a unit, e.g. 500ms, 1s, 2m", data)
		}
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return nil, badValue("invalid duration %q: want a number with a unit, e.g. 500ms, 1s, 2m", s)
		}
		return d, nil
	case to == sizeType:
		switch x := data.(type) {
		case string:
			v, err := ParseSize(x)
			if err != nil {
				return nil, badValue("%v", err)
			}
			return v, nil
		case Size:
			return x, nil
		default:
			n, err := toInt64(data)
			if err != nil || n < 0 {
				return nil, badValue("invalid size %v: want a whole number of bytes with an optional unit, e.g. 8mb", data)
			}
			return Size(n), nil
		}
	case to == stringSliceType:
		return toStringList(data)
	}
	switch to.Kind() {
	case reflect.String:
		switch data.(type) {
		case string:
			return data, nil
		case []any, map[string]any:
			return nil, badValue("want a single value, got %s", kindWord(data))
		default:
			return fmt.Sprint(data), nil
		}
	case reflect.Bool:
		switch x := data.(type) {
		case bool:
			return x, nil
		case string:
			b, err := strconv.ParseBool(strings.TrimSpace(x))
			if err != nil {
				return nil, badValue("invalid boolean %q: want true or false", x)
			}
			return b, nil
		default:
			return nil, badValue("invalid boolean %v: want true or false", data)
		}
	case reflect.Int, reflect.Int64, reflect.Int32:
		n, err := toInt64(data)
		if err != nil {
			return nil, err
		}
		return reflect.ValueOf(n).Convert(to).Interface(), nil
	case reflect.Uint64, reflect.Uint, reflect.Uint32:
		n, err := toInt64(data)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, badValue("invalid value %d: must not be negative", n)
		}
		return reflect.ValueOf(uint64(n)).Convert(to).Interface(), nil
	}
	return data, nil
}

func kindWord(v any) string {
	switch v.(type) {
	case []any:
		return "a list"
	case map[string]any:
		return "a map"
	}
	return fmt.Sprintf("%T", v)
}

func toInt64(v any) (int64, error) {
	switch x := v.(type) {
	case int:
		return int64(x), nil
	case int64:
		return x, nil
	case int32:
		return int64(x), nil
	case uint64:
		if x > math.MaxInt64 {
			return 0, badValue("invalid integer %d: too large", x)
		}
		return int64(x), nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<62 {
			return int64(x), nil
		}
		return 0, badValue("invalid integer %v: want a whole number", x)
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		if err != nil {
			return 0, badValue("invalid integer %q: want a whole number", x)
		}
		return n, nil
	}
	return 0, badValue("invalid integer: want a whole number, got %s", kindWord(v))
}

// toStringList accepts a YAML list or a comma-separated string. Entries are
// trimmed; an empty entry is an error, but a wholly empty value is the empty
// list (the selector treats it as present but empty).
func toStringList(data any) (any, error) {
	var parts []string
	switch x := data.(type) {
	case []string:
		parts = x
	case string:
		if strings.TrimSpace(x) == "" {
			return []string{}, nil
		}
		parts = strings.Split(x, ",")
	case []any:
		for _, e := range x {
			switch ev := e.(type) {
			case []any, map[string]any:
				return nil, badValue("list entries must be single values, got %s", kindWord(ev))
			case nil:
				parts = append(parts, "")
			default:
				parts = append(parts, fmt.Sprint(ev))
			}
		}
		if stateOf(data) == KeyEmpty {
			return []string{}, nil
		}
	case map[string]any:
		return nil, badValue("want a list or a comma-separated string, got a map")
	default:
		parts = []string{fmt.Sprint(x)}
	}
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, badValue("entry %d of the list is empty", i+1)
		}
		out = append(out, p)
	}
	return out, nil
}

// formatValue writes a field in the syntax the loader reads back.
func formatValue(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case time.Duration:
		return formatDuration(x)
	case Size:
		if x == 0 {
			return "0"
		}
		return x.String()
	case []string:
		return strings.Join(x, ",")
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	}
	switch v.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint64, reflect.Uint32:
		return strconv.FormatUint(v.Uint(), 10)
	}
	return fmt.Sprint(v.Interface())
}

// formatDuration writes d in its largest exact unit ("500ms", "30s", "1m").
func formatDuration(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}} {
		if d != 0 && d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return d.String()
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
