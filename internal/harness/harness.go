// Package harness is what the tests of several packages start the same
// way: a coordinator on a memory store served on loopback, a listener, a
// server run until the test ends, a context bounded by the test. Tests
// only (it imports the testing package); the external test packages of
// coordinator and tabletserver use it.
package harness

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// Listen listens on a free port of 127.0.0.1, closed when the test ends.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Run runs serve until the returned stop is called or the test ends
// (stop is idempotent and waits for serve to return).
func Run(t testing.TB, serve func(ctx context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); serve(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// MemoryStore is a memory backend's store, closed when the test ends.
func MemoryStore(t testing.TB) *memory.Store {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	return s
}

// Coordinator is a coordinator served on 127.0.0.1 for a test.
type Coordinator struct {
	Srv  *coordinator.Server
	Addr string
	stop func()
}

// Stop stops the coordinator and waits for it (again: nothing).
func (c *Coordinator) Stop() { c.stop() }

// The test defaults StartCoordinator fills in where opts has none.
const (
	SessionTimeout        = 2 * time.Second        // of the coordinator's backend client
	TabletSessionTimeout  = time.Second            // coordinator.tablet-server.session-timeout
	MetadataStreamMaxWait = 200 * time.Millisecond // coordinator.metadata-stream.max-wait
)

// StartCoordinator serves a coordinator on s with opts: Listener is a new
// loopback one; Open (a client of s with SessionTimeout) and Logger (the
// test's) are filled in when opts has none, and so are
// TabletServerSessionTimeout and MetadataStreamMaxWait (the defaults
// above). It stops when the test ends.
func StartCoordinator(t testing.TB, s *memory.Store, opts coordinator.Options) *Coordinator {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if opts.Open == nil {
		opts.Open = func(ctx context.Context) (core.MetadataBackend, error) {
			return s.NewClient(core.ClientOptions{SessionTimeout: SessionTimeout}), nil
		}
	}
	opts.Listener = l
	if opts.Logger == nil {
		opts.Logger = testutil.Logger(t)
	}
	if opts.TabletServerSessionTimeout == 0 {
		opts.TabletServerSessionTimeout = TabletSessionTimeout
	}
	if opts.MetadataStreamMaxWait == 0 {
		opts.MetadataStreamMaxWait = MetadataStreamMaxWait
	}
	srv, err := coordinator.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &Coordinator{Srv: srv, Addr: l.Addr().String(), stop: Run(t, srv.Serve)}
}

// StartLeader is StartCoordinator on a store of its own, waiting until the
// coordinator leads.
func StartLeader(t testing.TB, opts coordinator.Options) *Coordinator {
	t.Helper()
	c := StartCoordinator(t, MemoryStore(t), opts)
	testutil.WaitFor(t, 5*time.Second, "the coordinator leads", c.Srv.IsLeader)
	return c
}
