package memory

import (
	"context"
	"fmt"
	"sync"

	"github.com/metaplane/metaplane/core"
)

// Descriptor describes the memory backend. It has no selector key: it is
// only ever chosen explicitly (tests, demos, the plugin conformance run).
var Descriptor = core.BackendDescriptor{
	Name:          "memory",
	Description:   "in-memory reference backend for tests; not durable, not for production",
	TabletServers: core.TabletServersThroughCoordinator,
}

var _ core.Provider = (*Provider)(nil)

// Provider serves clients of one Store to a plugin host or a test. The zero
// value is usable with default StoreOptions.
type Provider struct {
	// Options configure the store made by Start.
	Options StoreOptions

	mu     sync.Mutex
	store  *Store
	closed bool
}

// NewProvider returns a provider whose store uses opts.
func NewProvider(opts StoreOptions) *Provider { return &Provider{Options: opts} }

// Descriptor returns Descriptor.
func (p *Provider) Descriptor() core.BackendDescriptor { return Descriptor }

// Start makes the provider's store. The settings are not used: the
// memory backend has no settings of its own. Calling NewClient without
// Start starts the provider implicitly. Errors: ErrClosed after Close.
func (p *Provider) Start(ctx context.Context, settings map[string]string) error {
	_, err := p.getStore()
	return err
}

func (p *Provider) getStore() (*Store, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("%w: memory provider", core.ErrClosed)
	}
	if p.store == nil {
		p.store = NewStore(p.Options)
	}
	return p.store, nil
}

// Store returns the provider's store, starting it if needed (nil after
// Close).
func (p *Provider) Store() *Store {
	s, _ := p.getStore()
	return s
}

// NewClient opens a client of the provider's store with its own session.
// Errors: ErrClosed after Close, context errors.
func (p *Provider) NewClient(ctx context.Context, opts core.ClientOptions) (core.MetadataBackend, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := p.getStore()
	if err != nil {
		return nil, err
	}
	return s.NewClient(opts), nil
}

// Close closes every client and the store. Idempotent.
func (p *Provider) Close() error {
	p.mu.Lock()
	s := p.store
	p.closed = true
	p.store = nil
	p.mu.Unlock()
	if s != nil {
		return s.Close()
	}
	return nil
}

// CompactHistory drops the store's history up to and including revision,
// so that a watch from it fails with core.ErrCompacted: the test hook the
// plugin server exposes (core.HistoryCompactor), so the suite's
// compaction properties run across a real plugin process too. Errors:
// ErrClosed after Close, context errors.
func (p *Provider) CompactHistory(ctx context.Context, revision int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s, err := p.getStore()
	if err != nil {
		return err
	}
	s.Compact(revision)
	return nil
}
