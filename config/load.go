package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"github.com/metaplane/metaplane/core"
)

// LoadOptions are the sources Load reads, lowest precedence first
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
	ExtraBackends []core.BackendDescriptor
	// DiscoverBackends, when set, is asked for the third-party backends
	// found in the plugin directory (the value of
	// metadata.backend.plugin.dir from the sources above, "" for the
	// default), so their selector keys take part in loading and selection
	// like ExtraBackends. It is a hook because core does not launch
	// plugins; the binary passes plugins.DiscoverThirdParty. An error is
	// reported as a problem of metadata.backend.plugin.dir.
	DiscoverBackends func(pluginDir string) ([]core.BackendDescriptor, error)
	// Observer says the process is a tablet server (an observer, never a
	// Raft voter): the rules that only concern a voter (the voter list
	// required with several seed nodes, node.id among the voters) are
	// skipped.
	Observer bool
}

// Load builds a Config from the defaults, then opts.File, then
// opts.Env, then opts.Overrides (a later source wins per key), validates it
// and selects the backend (Config.Selected). The caller owns the result.
//
// Errors: a *Error listing every problem found (unknown keys, bad
// values, inconsistent combinations, a refused selection, an unreadable
// file), each naming its key, in a stable order; or a plain error for a
// programming mistake in opts.ExtraBackends. On error the Config is nil.
func Load(opts LoadOptions) (*Config, error) {
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
		opts.ExtraBackends = append(append([]core.BackendDescriptor(nil), opts.ExtraBackends...), found...)
	}
	extras, err := extraPrefixes(opts.ExtraBackends)
	if err != nil {
		return nil, err
	}
	extras.pluginDir = rawPluginDir(merged, opts)

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
					probs.Add(name, fmt.Sprintf("environment variable names unknown key %s%s%s", key, suggest(key), extras.pluginHint(key)))
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
	// Load reads files anyway: it checks the ones the configuration names
	// too, as a step of its own (Validate does no file I/O).
	var fe *Error
	if errors.As(cfg.CheckFiles(), &fe) {
		probs = append(probs, fe.Problems...)
	}
	backends := append(BuiltinBackends(), opts.ExtraBackends...)
	sel, err := SelectBackend(present, backends, cfg.Metadata.Backend.Default)
	if err != nil {
		var ce *Error
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
	cfg.Present = present
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
