// Command brokenplugin is a deliberately broken backend plugin for the
// conformance command's tests: the memory backend whose Children lists no
// names.
package main

import (
	"context"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/plugins"
)

type provider struct{ *memory.Provider }

func (p provider) Descriptor() core.BackendDescriptor {
	return core.BackendDescriptor{Name: "broken", SelectorKey: "broken.endpoints", Description: "test plugin"}
}

func (p provider) NewClient(ctx context.Context, opts core.ClientOptions) (core.MetadataBackend, error) {
	b, err := p.Provider.NewClient(ctx, opts)
	if err != nil {
		return nil, err
	}
	return backend{b}, nil
}

type backend struct{ core.MetadataBackend }

func (b backend) Children(ctx context.Context, path string, opts core.ReadOptions) ([]string, core.Stat, error) {
	_, st, err := b.MetadataBackend.Children(ctx, path, opts)
	return nil, st, err
}

func main() { plugins.Serve(provider{memory.NewProvider(memory.StoreOptions{})}) }
