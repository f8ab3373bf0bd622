package raft

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/conformance"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// memberStore is a conformance store: a fresh cluster of in-process members
// on loopback; its clients are clients of the members in turn.
type memberStore struct {
	providers []*Provider
	mu        sync.Mutex
	next      int
}

func newMemberStore(t conformance.T, n int) *memberStore {
	t.Helper()
	voters := make([]Voter, n)
	for i := range voters {
		voters[i] = Voter{ID: uint64(i + 1), Address: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	}
	root := t.TempDir()
	s := &memberStore{providers: make([]*Provider, n)}
	t.Cleanup(func() {
		for _, p := range s.providers {
			if p != nil {
				p.Close()
			}
		}
	})
	opts := make([]Options, n)
	for i := range opts {
		opts[i] = testOptions(filepath.Join(root, fmt.Sprintf("m%d", i+1)), uint64(i+1), voters)
	}
	bootstrapAll(t, opts)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			p := NewProvider(opts[i])
			errs[i] = p.Start(context.Background(), nil)
			s.providers[i] = p
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("start member: %v", err)
		}
	}
	return s
}

func freePort(t conformance.T) int {
	if tb, ok := t.(testing.TB); ok {
		return testutil.FreePort(tb)
	}
	t.Fatalf("conformance.T %T is not a testing.TB", t)
	return 0
}

func (s *memberStore) NewClient(t conformance.T, opts conformance.ClientOptions) core.MetadataBackend {
	t.Helper()
	s.mu.Lock()
	p := s.providers[s.next%len(s.providers)]
	s.next++
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := p.Client(ctx, core.ClientOptions{SessionTimeout: opts.SessionTimeout, Name: t.Name()})
	if err != nil {
		t.Fatalf("open a client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (s *memberStore) ExpireSession(t conformance.T, c core.MetadataBackend) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.(*Client).ExpireSession(ctx); err != nil {
		t.Fatalf("expire session: %v", err)
	}
}

// Silence stops c's renewals (conformance.Silencer): a client runs in its
// member's process, so a crashed client is its renewal loop stopped; the
// leader then expires its session by its timeout.
func (s *memberStore) Silence(t conformance.T, c core.MetadataBackend) {
	c.(*Client).silenced.Store(true)
}

func TestConformanceOneVoter(t *testing.T) {
	conformance.Run(t, conformance.Harness{Name: "raft (1 voter, in-process)", NewStore: func(t conformance.T) conformance.Store {
		return newMemberStore(t, 1)
	}})
}

// TestConformanceThreeVoters runs the suite on three in-process members
// (clients spread over them). It duplicates
// TestConformancePluginProcessThreeVoters without the process boundary, so
// it runs only with METAPLANE_SOAK=1 to keep the default run short.
func TestConformanceThreeVoters(t *testing.T) {
	if os.Getenv("METAPLANE_SOAK") == "" {
		t.Skip("set METAPLANE_SOAK=1 to run the suite on three in-process voters too")
	}
	conformance.Run(t, conformance.Harness{Name: "raft (3 voters, in-process)", NewStore: func(t conformance.T) conformance.Store {
		return newMemberStore(t, 3)
	}})
}
