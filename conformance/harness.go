package conformance

import (
	"time"

	"github.com/metaplane/metaplane/core"
)

// T is the part of *testing.T the suite and harnesses use. Run adapts a
// *testing.T to it; the `metaplane conformance` command provides its own
// implementation, so the suite runs without `go test`.
type T interface {
	Helper()
	Name() string
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Failed() bool
	Cleanup(func())
	TempDir() string
}

// Harness tells the suite how to get stores of the backend under test.
type Harness struct {
	// Name names the backend in messages.
	Name string
	// NewStore opens a fresh, empty store for one property. It registers
	// its own cleanup with t.Cleanup and fails t (never skips it) when the
	// store cannot be started.
	NewStore func(t T) Store
	// TimeScale, for a slow backend, multiplies the suite's bounds: the
	// per-property deadline (PropertyTimeout, or RunStandalone's Timeout)
	// and every wait inside a property (20 s). 0 means 1; it never
	// shortens them (values below 1 count as 1).
	TimeScale float64
}

// scale returns d multiplied by h.TimeScale (see there).
func (h Harness) scale(d time.Duration) time.Duration {
	if h.TimeScale <= 1 {
		return d
	}
	return time.Duration(float64(d) * h.TimeScale)
}

// Store is one shared store of the backend under test, with as many clients
// as a property needs.
type Store interface {
	// NewClient opens a new client of the store: a MetadataBackend with a
	// session of its own. The store closes it at cleanup if the property
	// did not.
	NewClient(t T, opts ClientOptions) core.MetadataBackend
	// ExpireSession expires client c's session now, as if its timeout had
	// passed without a heartbeat: its ephemerals are deleted and c sees
	// SessionExpired (then, usually, a new session).
	ExpireSession(t T, c core.MetadataBackend)
}

// ClientOptions are the options of a new client.
type ClientOptions struct {
	// SessionTimeout is the session timeout to ask for; 0 means the
	// backend's default for tests.
	SessionTimeout time.Duration
}
