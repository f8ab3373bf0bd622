// Command brokenplugin is a deliberately broken backend plugin for the
// conformance command's tests: the memory backend whose Children lists no
// names, whose capabilities name it "memory" (with no selector key)
// although its descriptor says "broken" (selected by broken.endpoints),
// and which, with broken.hang=true, never answers a Children
// call (ignoring its context) and writes its pid to broken.pidfile when
// set.
package main

import (
	"context"
	"os"
	"strconv"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/plugins"
)

type provider struct {
	*memory.Provider
	hang bool
}

func (p *provider) Descriptor() core.BackendDescriptor {
	d := p.Provider.Descriptor()
	d.Name, d.SelectorKey, d.Description = "broken", "broken.endpoints", "test plugin"
	return d
}

func (p *provider) Start(ctx context.Context, settings map[string]string) error {
	p.hang = settings["broken.hang"] == "true"
	if f := settings["broken.pidfile"]; f != "" {
		if err := os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return err
		}
	}
	return p.Provider.Start(ctx, settings)
}

func (p *provider) NewClient(ctx context.Context, opts core.ClientOptions) (core.MetadataBackend, error) {
	b, err := p.Provider.NewClient(ctx, opts)
	if err != nil {
		return nil, err
	}
	return backend{b, p.hang}, nil
}

type backend struct {
	core.MetadataBackend
	hang bool
}

// Unwrap lets core.Optional find the memory backend's optional parts.
func (b backend) Unwrap() core.MetadataBackend { return b.MetadataBackend }

func (b backend) Children(ctx context.Context, path string, opts core.ReadOptions) ([]string, core.Stat, error) {
	if b.hang {
		select {} // the bug: a call that never returns, whatever its context
	}
	_, st, err := b.MetadataBackend.Children(ctx, path, opts)
	return nil, st, err
}

func main() { plugins.Serve(&provider{Provider: memory.NewProvider(memory.StoreOptions{})}) }
