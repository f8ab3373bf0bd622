package core

import (
	"context"
	"time"
)

// BackendDescriptor describes a backend implementation: what it is called
// and which configuration key selects it.
type BackendDescriptor struct {
	// Name is the backend's name ("memory", "zookeeper", "raft", "etcd",
	// ...); its plugin binary is metaplane-backend-<Name>.
	Name string
	// SelectorKey is the configuration key whose presence selects this
	// backend (e.g. "zookeeper.address", "coordinator.seed.nodes"). Empty
	// for a backend that is only ever chosen explicitly (memory).
	SelectorKey string
	// Description is one line for operators.
	Description string
	// Deprecated, when set, is the warning printed when it is selected.
	Deprecated string
	// TabletServers is how tablet servers follow this backend; it must be
	// what the backend's clients declare in Capabilities.TabletServers. The
	// host reads it here, before any plugin starts (a tablet server never
	// starts a backend it does not need).
	TabletServers TabletServerMode
}

// ClientOptions are the options of a new backend client.
type ClientOptions struct {
	// SessionTimeout is the session timeout to ask for; 0 means the
	// backend's configured default.
	SessionTimeout time.Duration
	// Name labels the client in logs and status (e.g. a coordinator id).
	Name string
}

// Provider is what a backend package offers to the process that hosts it
// (the plugin server, or a test): start the backend's member or connection
// from configuration, then open clients of it. Each client is a
// MetadataBackend with its own session. STYLE: core defines the factory
// type; the binary (cmd, plugins) fills the registry of known backends.
type Provider interface {
	// Descriptor returns the backend's descriptor. It does not block.
	Descriptor() BackendDescriptor
	// Start opens the backend from its settings (connects to ZooKeeper,
	// starts the Raft member, ...). It is called once, before NewClient.
	// settings are the flat configuration keys and values (the same map that
	// crosses the plugin wire: "zookeeper.address" -> "h:2181"; a list is
	// comma-joined); the backend parses and validates the keys it owns and
	// ignores the others. The map is not retained. Errors wrap
	// ErrInvalidArgument and name the key at fault where there is one.
	Start(ctx context.Context, settings map[string]string) error
	// NewClient opens a client with a session of its own. Safe for
	// concurrent use after Start. Errors: ErrUnavailable, ErrClosed,
	// context errors.
	NewClient(ctx context.Context, opts ClientOptions) (MetadataBackend, error)
	// Close closes every client and stops the backend. Idempotent.
	Close() error
}
