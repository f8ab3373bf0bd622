// Package zookeeper is metaplane's ZooKeeper backend (deprecated; kept for
// the dual-backend window): the whole MetadataBackend contract over an
// external ZooKeeper ensemble, with the original system's znode layout and
// values under zookeeper.path.root, FIP-9 leader election and epoch
// fencing, and ZooKeeper sessions as the contract's sessions.
//
// Each client (Provider.NewClient, Open) is one ZooKeeper session
// (github.com/go-zookeeper/zk). docs/zookeeper.md is the operator's guide.
package zookeeper

import (
	"context"
	"errors"
	"sync"

	"github.com/metaplane/metaplane/core"
)

// Provider offers the ZooKeeper backend to its host (the plugin server or
// a test). Start reads the zookeeper.* keys; each NewClient opens a
// ZooKeeper session. The zero value is ready to use; Options, when set
// before Start, replace the configuration (tests).
type Provider struct {
	// Options, when non-nil, are used instead of the zookeeper.* keys of
	// the configuration given to Start.
	Options *Options

	mu      sync.Mutex
	opts    Options
	started bool
	closed  bool
	clients map[*Backend]struct{}
}

var _ core.Provider = (*Provider)(nil)

// Descriptor names the ZooKeeper backend and its selector key, with the
// deprecation warning. The host's selector holds the same data for the
// built-in backends (config), checked equal by a test.
var Descriptor = core.BackendDescriptor{
	Name:        "zookeeper",
	SelectorKey: "zookeeper.address",
	Description: "an external ZooKeeper ensemble, with the original znode layout",
	Deprecated:  "the ZooKeeper backend is deprecated and will be removed in a later major release: migrate to the Raft backend (see docs/zookeeper.md)",
}

// Descriptor returns Descriptor.
func (p *Provider) Descriptor() core.BackendDescriptor { return Descriptor }

// Start reads the zookeeper.* keys of settings (or p.Options), validates them
// (every problem at once, naming its key), connects once to check the
// ensemble is reachable and creates the root when missing. Errors:
// configuration problems, ErrUnavailable, ErrClosed, context errors.
func (p *Provider) Start(ctx context.Context, settings map[string]string) error {
	var o Options
	if p.Options != nil {
		o = *p.Options
	} else {
		var err error
		if o, err = OptionsFromSettings(settings); err != nil {
			return err
		}
	}
	if err := o.Validate(); err != nil {
		return err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return core.ErrClosed
	}
	p.mu.Unlock()
	probe, err := Open(ctx, o, core.ClientOptions{Name: "start-probe"})
	if err != nil {
		return err
	}
	probe.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.opts, p.started = o, true
	if p.clients == nil {
		p.clients = map[*Backend]struct{}{}
	}
	return nil
}

// NewClient opens a client with a ZooKeeper session of its own (its
// timeout opts.SessionTimeout, or zookeeper.client.session-timeout).
// Errors: ErrUnavailable, ErrClosed, context errors; an error when Start
// has not succeeded.
func (p *Provider) NewClient(ctx context.Context, opts core.ClientOptions) (core.MetadataBackend, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, core.ErrClosed
	}
	if !p.started {
		p.mu.Unlock()
		return nil, errors.New("zookeeper: NewClient before a successful Start")
	}
	o := p.opts
	p.mu.Unlock()
	b, err := Open(ctx, o, opts)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		b.Close()
		return nil, core.ErrClosed
	}
	p.clients[b] = struct{}{}
	return b, nil
}

// Close closes every client opened by NewClient. Idempotent.
func (p *Provider) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	cs := p.clients
	p.clients = nil
	p.mu.Unlock()
	for b := range cs {
		b.Close()
	}
	return nil
}
