// Package tinymem is an example third-party metaplane backend: an
// in-memory tree held by the plugin process, written against the public
// contract (package core) only. It is small and complete: every required
// part of core.MetadataBackend, exact history and session expiry. Its data
// lives as long as the plugin process, so it is for trying the kit and for
// tests, not for production. docs/writing-a-backend.md walks through it.
package tinymem

import (
	"context"
	"fmt"
	"sync"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/settings"
)

// Descriptor names the backend (its plugin binary is
// metaplane-backend-tinymem) and its selector key: setting
// tinymem.max-nodes selects it.
var Descriptor = core.BackendDescriptor{
	Name:        "tinymem",
	SelectorKey: "tinymem.max-nodes",
	Description: "an example in-memory tree (data lives as long as the plugin process)",
}

// Defaults of the keys tinymem owns.
const (
	DefaultMaxNodes = 100000
	DefaultMaxBytes = 256 * settings.MiB
	DefaultHistory  = 100000
)

// Provider hosts one store and opens its clients.
type Provider struct {
	mu    sync.Mutex
	store *store
}

// NewProvider returns a provider to Start.
func NewProvider() *Provider { return &Provider{} }

// Descriptor implements core.Provider.
func (p *Provider) Descriptor() core.BackendDescriptor { return Descriptor }

// Start reads its keys from the flat settings and creates the store:
// tinymem.max-nodes (the most nodes the tree holds, root included),
// tinymem.max-bytes (the most data bytes the tree holds, and separately
// the change history) and tinymem.history (how many change events watches
// can replay). Together they bound the memory the plugin uses.
func (p *Provider) Start(ctx context.Context, flat map[string]string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	maxNodes, maxBytes, history := int64(DefaultMaxNodes), DefaultMaxBytes, int64(DefaultHistory)
	r := settings.NewReader(flat)
	r.Int64("tinymem.max-nodes", &maxNodes)
	r.Size("tinymem.max-bytes", &maxBytes)
	r.Int64("tinymem.history", &history)
	if err := r.Err(); err != nil {
		return fmt.Errorf("%w: %v", core.ErrInvalidArgument, err)
	}
	if maxNodes < 1 {
		return fmt.Errorf("%w: tinymem.max-nodes: %d, want at least 1", core.ErrInvalidArgument, maxNodes)
	}
	if maxBytes < core.DefaultMaxValueSize {
		return fmt.Errorf("%w: tinymem.max-bytes: %d, want at least one value's limit, %d", core.ErrInvalidArgument, maxBytes, core.DefaultMaxValueSize)
	}
	if history < 1 {
		return fmt.Errorf("%w: tinymem.history: %d, want at least 1", core.ErrInvalidArgument, history)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.store != nil {
		return fmt.Errorf("%w: tinymem: started twice", core.ErrInvalidArgument)
	}
	p.store = newStore(int(maxNodes), int64(maxBytes), int(history))
	return nil
}

// NewClient opens a client with a session of its own.
func (p *Provider) NewClient(ctx context.Context, opts core.ClientOptions) (core.MetadataBackend, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	s := p.store
	p.mu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("%w: tinymem: not started", core.ErrUnavailable)
	}
	return s.newClient(opts)
}

// CompactHistory implements core.HistoryCompactor, the conformance suite's
// hook for the compacted-history properties.
func (p *Provider) CompactHistory(ctx context.Context, revision int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	s := p.store
	p.mu.Unlock()
	if s == nil {
		return fmt.Errorf("%w: tinymem: not started", core.ErrClosed)
	}
	return s.compact(revision)
}

// Close closes every client and the store. Idempotent.
func (p *Provider) Close() error {
	p.mu.Lock()
	s := p.store
	p.mu.Unlock()
	if s != nil {
		s.close()
	}
	return nil
}

var (
	_ core.Provider         = (*Provider)(nil)
	_ core.HistoryCompactor = (*Provider)(nil)
)
