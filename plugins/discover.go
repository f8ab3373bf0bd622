package plugins

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/core"
)

// Found is a backend plugin binary found in a plugin directory.
type Found struct {
	// Path is the binary's path.
	Path string
	// Descriptor is what the binary declared in describe mode.
	Descriptor core.BackendDescriptor
}

// scan finds the backend plugins in dir (empty: DefaultDir) whose file
// names skip (nil: none) does not reject: every executable regular file
// (or link to one) named metaplane-backend-<name>, sorted by name, and
// describes each one (see Describe) without starting it. A plugin whose
// descriptor's name differs from <name> is refused. It returns every
// plugin it could describe; the error joins one error per plugin it could
// not (each naming the file). Cancelling ctx stops the describing.
func scan(ctx context.Context, dir string, skip func(file string) bool) ([]Found, error) {
	if dir == "" {
		var err error
		if dir, err = DefaultDir(); err != nil {
			return nil, err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %v", core.ErrInvalidArgument, KeyPluginDir, dir, err)
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, BinaryPrefix) && len(n) > len(BinaryPrefix) && (skip == nil || !skip(n)) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var found []Found
	var errs []error
	for _, n := range names {
		path := filepath.Join(dir, n)
		st, err := os.Stat(path)
		if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			continue
		}
		d, err := Describe(ctx, path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if want := strings.TrimPrefix(n, BinaryPrefix); d.Name != want {
			errs = append(errs, fmt.Errorf("%w: plugin %s declares the backend name %q; its file must be named %s%s", core.ErrInvalidArgument, path, d.Name, BinaryPrefix, d.Name))
			continue
		}
		found = append(found, Found{Path: path, Descriptor: d})
	}
	return found, errors.Join(errs...)
}

// ThirdParty returns the descriptors of the found plugins that are not
// built-in backends (config.BuiltinBackends) and declare a selector key:
// what config.LoadOptions.ExtraBackends takes.
func ThirdParty(found []Found) []core.BackendDescriptor {
	builtin := map[string]bool{}
	for _, d := range config.BuiltinBackends() {
		builtin[d.Name] = true
	}
	var out []core.BackendDescriptor
	for _, f := range found {
		if !builtin[f.Descriptor.Name] && f.Descriptor.SelectorKey != "" {
			out = append(out, f.Descriptor)
		}
	}
	return out
}

// DiscoverThirdParty returns the descriptors of the third-party backend
// plugins in dir (empty: DefaultDir) that declare a selector key: every
// executable named metaplane-backend-<name>, described (see Describe)
// without being started. It does not run the built-in plugins' binaries,
// whose descriptors config already knows, so a configuration load costs
// one describe per third-party plugin only. It is what the metaplane
// command passes to config.LoadOptions.DiscoverBackends. It returns every
// descriptor it could learn; the error joins one error per plugin it could
// not describe (each naming the file) or whose descriptor's name differs
// from <name>. Cancelling ctx stops the describing.
func DiscoverThirdParty(ctx context.Context, dir string) ([]core.BackendDescriptor, error) {
	// The shipped plugins: config knows the selector backends' descriptors,
	// and memory declares no selector key.
	shipped := map[string]bool{BinaryPrefix + "memory": true}
	for _, d := range config.BuiltinBackends() {
		shipped[BinaryPrefix+d.Name] = true
	}
	found, err := scan(ctx, dir, func(file string) bool { return shipped[file] })
	return ThirdParty(found), err
}
