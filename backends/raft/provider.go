package raft

import (
	"context"
	"fmt"
	"sync"

	"github.com/lni/dragonboat/v4"

	"github.com/metaplane/metaplane/core"
)

var dragonboatSkipLogInfo = dragonboat.NodeHostInfoOption{SkipLogInfo: true}

// Provider is the Raft backend's core.Provider: Start runs this process's
// voter (a Dragonboat NodeHost and the Pebble state machine under
// coordinator.raft.dir); NewClient opens clients of it.
//
// The zero Provider takes its options from the configuration given to
// Start; a Provider built with NewProvider uses the given Options instead
// (tests, tools). It is safe for concurrent use.
type Provider struct {
	opts *Options

	mu sync.Mutex
	m  *member
}

var _ core.Provider = (*Provider)(nil)

// NewProvider returns a Provider that starts with o, ignoring the
// configuration passed to Start.
func NewProvider(o Options) *Provider { return &Provider{opts: &o} }

// Descriptor describes the Raft backend.
func (p *Provider) Descriptor() core.BackendDescriptor {
	return core.BackendDescriptor{
		Name:          "raft",
		SelectorKey:   "coordinator.seed.nodes",
		Description:   "embedded Raft quorum of the coordinators (Dragonboat, Pebble state machine)",
		TabletServers: core.TabletServersThroughCoordinator,
	}
}

// Start starts the member: it bootstraps a new cluster, restarts from the
// Raft state in coordinator.raft.dir, or joins (coordinator.raft.join).
// It returns once the replica runs (after waiting up to the first-election
// timeout plus one election timeout for a leader). Errors name the
// configuration key at fault; ErrUnavailable when the node host cannot
// start (port in use, locked directory).
func (p *Provider) Start(ctx context.Context, settings map[string]string) error {
	var o Options
	if p.opts != nil {
		o = *p.opts
	} else {
		var err error
		if o, err = OptionsFromSettings(settings); err != nil {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m != nil {
		return fmt.Errorf("%w: raft provider already started", core.ErrInvalidArgument)
	}
	m, err := startMember(ctx, o)
	if err != nil {
		return err
	}
	p.m = m
	return nil
}

// NewClient opens a client with its own session (granted by a replicated
// record; it waits for a leader up to the proposal timeout). Errors:
// ErrUnavailable, ErrClosed, context errors.
func (p *Provider) NewClient(ctx context.Context, opts core.ClientOptions) (core.MetadataBackend, error) {
	c, err := p.Client(ctx, opts)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Client is NewClient with the concrete type.
func (p *Provider) Client(ctx context.Context, opts core.ClientOptions) (*Client, error) {
	p.mu.Lock()
	m := p.m
	p.mu.Unlock()
	if m == nil {
		return nil, fmt.Errorf("%w: raft provider not started", core.ErrClosed)
	}
	return newClient(ctx, m, opts)
}

// Status is the member's status without a client.
func (p *Provider) Status() (core.Status, error) {
	p.mu.Lock()
	m := p.m
	p.mu.Unlock()
	if m == nil {
		return core.Status{}, errClosed
	}
	return m.status(context.Background()), nil
}

// Close closes every client and stops the member. Idempotent.
func (p *Provider) Close() error {
	p.mu.Lock()
	m := p.m
	p.mu.Unlock()
	if m == nil {
		return nil
	}
	m.mu.Lock()
	clients := make([]*Client, 0, len(m.clients))
	for c := range m.clients {
		clients = append(clients, c)
	}
	m.mu.Unlock()
	// Each Close may wait (bounded) for its best-effort records: close the
	// clients together so that the waits overlap.
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func(c *Client) {
			defer wg.Done()
			c.Close()
		}(c)
	}
	wg.Wait()
	m.close()
	return nil
}
