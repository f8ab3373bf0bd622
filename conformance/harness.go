package conformance

import (
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
)

// Harness tells the suite how to get stores of the backend under test.
type Harness struct {
	// Name names the backend in messages.
	Name string
	// NewStore opens a fresh, empty store for one property. It registers
	// its own cleanup with t.Cleanup and fails t (never skips it) when the
	// store cannot be started.
	NewStore func(t testing.TB) Store
}

// Store is one shared store of the backend under test, with as many clients
// as a property needs.
type Store interface {
	// NewClient opens a new client of the store: a MetadataBackend with a
	// session of its own. The store closes it at cleanup if the property
	// did not.
	NewClient(t testing.TB, opts ClientOptions) core.MetadataBackend
	// ExpireSession expires client c's session now, as if its timeout had
	// passed without a heartbeat: its ephemerals are deleted and c sees
	// SessionExpired (then, usually, a new session).
	ExpireSession(t testing.TB, c core.MetadataBackend)
}

// ClientOptions are the options of a new client.
type ClientOptions struct {
	// SessionTimeout is the session timeout to ask for; 0 means the
	// backend's default for tests.
	SessionTimeout time.Duration
}
