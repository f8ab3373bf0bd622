package config

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
	"github.com/metaplane/metaplane/settings"
)

// Flatten returns every key whose value is not empty, with its value as a
// string in the syntax the loader accepts (lists joined with ",",
// durations like "500ms", sizes like "8mb"), plus every Extra setting.
// Loading it back (decodeFlat) gives an equal Config (except Selected).
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

// pluginWithheld are the keys PluginSettings leaves out: secrets given
// inline that only the coordinator itself uses (a backend plugin process
// has no use for them, and its settings travel to it and may be logged by
// it).
var pluginWithheld = []string{"coordinator.gossip.encryption-key"}

// PluginSettings is Flatten without the inline secrets no backend needs
// (the gossip encryption key): what a host hands to a backend plugin's
// Start.
func (c *Config) PluginSettings() map[string]string {
	out := c.Flatten()
	for _, k := range pluginWithheld {
		delete(out, k)
	}
	return out
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
	cfg := Default()
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
		probs.Add(key, extras.unknownKey(key))
	}
	if _, set := present[keyRaftDir]; !set {
		cfg.Coordinator.Raft.Dir = underDataDir(cfg.DataDir, "raft")
	}
	return cfg, present
}

const keyRaftDir = "coordinator.raft.dir"

// underDataDir is the default location of name in data.dir: dir/name,
// keeping dir as written ("./data" gives "./data/raft").
func underDataDir(dir, name string) string {
	if strings.TrimSpace(dir) == "" {
		return "" // refused by validation (data.dir must not be empty)
	}
	if t := strings.TrimRight(dir, "/"); t != "" {
		dir = t
	} else {
		dir = ""
	}
	return dir + "/" + name
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
		d, err := settings.ParseDuration(s)
		if err != nil {
			return nil, badValue("%v", err)
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
			b, err := settings.ParseBool(x)
			if err != nil {
				return nil, badValue("%v", err)
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
		n, err := toUint64(data)
		if err != nil {
			return nil, err
		}
		if to.Kind() == reflect.Uint32 && n > math.MaxUint32 {
			return nil, badValue("invalid integer %d: too large (at most %d)", n, uint64(math.MaxUint32))
		}
		return reflect.ValueOf(n).Convert(to).Interface(), nil
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

// toUint64 is toInt64 for unsigned keys: the whole uint64 range, from a
// string or a YAML number (a float only where it is exact).
func toUint64(v any) (uint64, error) {
	switch x := v.(type) {
	case uint64:
		return x, nil
	case string:
		n, err := settings.ParseUint(x)
		if err != nil {
			return 0, badValue("%v", err)
		}
		return n, nil
	case float64:
		if x >= 0 && x == math.Trunc(x) && x < 1<<53 {
			return uint64(x), nil
		}
		if x >= 1<<53 {
			return 0, badValue("invalid integer %v: too large for a number in the file; quote it as a string", x)
		}
	}
	n, err := toInt64(v)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, badValue("invalid value %d: must not be negative", n)
	}
	return uint64(n), nil
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
		n, err := settings.ParseInt(x)
		if err != nil {
			return 0, badValue("%v", err)
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
		l, err := settings.ParseList(x)
		if err != nil {
			return nil, badValue("%v", err)
		}
		return l, nil
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
		return settings.FormatDuration(x)
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
