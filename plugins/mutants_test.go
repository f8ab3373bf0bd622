package plugins_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/conformance"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/plugins/plugintest"
)

// Seeded-bug plugins whose bug the host's client hides: a call with an
// ended context never reaches the plugin through Plugin.NewClient, and
// after Close that client answers ErrClosed itself. Through
// Plugin.NewConformanceClient (plugintest's default) the suite reaches the
// backend and must catch them.

const (
	// bugIgnoresEndedContext: the backend's calls never look at their
	// context (it only times out its own waits), so a call with a
	// cancelled context reads, writes and campaigns.
	bugIgnoresEndedContext = "ignores an ended context"
	// bugServesAfterClose: the backend serves reads from a connection
	// shared by its clients, which Close does not mark closed.
	bugServesAfterClose = "serves reads after Close"
	// bugStreamMixesRevisions: the backend's streamed snapshot reads each
	// page from a snapshot taken anew, labelled with the first page's
	// revision; no host can hide it.
	bugStreamMixesRevisions = "streamed snapshot mixing revisions"
)

// StreamSnapshot is the memory backend's, or pages mixing revisions.
func (m *mutantClient) StreamSnapshot(ctx context.Context, prefix string, pageBytes int, fn func(rev int64, nodes []core.Node) error) error {
	if m.bug == bugStreamMixesRevisions {
		return testutil.MixedRevisionStream(ctx, m.MetadataBackend, prefix, pageBytes, fn)
	}
	ss, _ := core.Optional[core.SnapshotStreamer](m.MetadataBackend)
	return ss.StreamSnapshot(ctx, prefix, pageBytes, fn)
}

// TestStreamMixingRevisionsCaughtThroughThePlugin: a plugin whose streamed
// snapshot mixes revisions fails Snapshot/Streamed/ConcurrentWriters
// across the plugin boundary, in every run.
func TestStreamMixingRevisionsCaughtThroughThePlugin(t *testing.T) {
	for run := 0; run < 3; run++ {
		h := plugintest.InProcessHarness(t, func() core.Provider {
			return &mutantProvider{Provider: memory.NewProvider(memory.StoreOptions{}), bug: bugStreamMixesRevisions}
		}, plugintest.Options{})
		results, err := conformance.RunStandalone(h, conformance.StandaloneOptions{Run: "^Snapshot/Streamed/ConcurrentWriters$"})
		if err != nil {
			t.Fatal(err)
		}
		if len(results) != 1 || results[0].Status != conformance.Failed {
			t.Fatalf("run %d: %+v; want Snapshot/Streamed/ConcurrentWriters failed", run, results)
		}
		t.Logf("run %d: caught: %s", run, strings.Join(results[0].Messages, "; "))
	}
}

// mutantProvider is the memory provider whose clients have bug.
type mutantProvider struct {
	*memory.Provider
	bug string

	mu     sync.Mutex
	shared core.MetadataBackend // bugServesAfterClose: the readers' client
}

func (p *mutantProvider) NewClient(ctx context.Context, opts core.ClientOptions) (core.MetadataBackend, error) {
	c, err := p.Provider.NewClient(ctx, opts)
	if err != nil {
		return nil, err
	}
	m := &mutantClient{MetadataBackend: c, bug: p.bug, reads: c}
	if p.bug == bugServesAfterClose {
		p.mu.Lock()
		if p.shared == nil {
			p.shared, err = p.Provider.NewClient(ctx, core.ClientOptions{Name: "shared reader"})
		}
		m.reads = p.shared
		p.mu.Unlock()
	}
	return m, err
}

// mutantClient is a memory client with one bug; Unwrap keeps the memory
// client's optional parts reachable.
type mutantClient struct {
	core.MetadataBackend
	bug   string
	reads core.MetadataBackend
}

func (m *mutantClient) Unwrap() core.MetadataBackend { return m.MetadataBackend }

func (m *mutantClient) ctx(ctx context.Context) context.Context {
	if m.bug == bugIgnoresEndedContext {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

func (m *mutantClient) GetMany(ctx context.Context, paths []string, opts core.ReadOptions) ([]core.GetResult, error) {
	return m.reads.GetMany(m.ctx(ctx), paths, opts)
}

func (m *mutantClient) Children(ctx context.Context, path string, opts core.ReadOptions) ([]string, core.Stat, error) {
	return m.reads.Children(m.ctx(ctx), path, opts)
}

func (m *mutantClient) Snapshot(ctx context.Context, prefix string) (core.Snapshot, error) {
	return m.reads.Snapshot(m.ctx(ctx), prefix)
}

func (m *mutantClient) Txn(ctx context.Context, ops []core.Op, opts core.TxnOptions) (core.TxnResult, error) {
	return m.MetadataBackend.Txn(m.ctx(ctx), ops, opts)
}

func (m *mutantClient) Leader(ctx context.Context) (core.LeaderInfo, error) {
	return m.MetadataBackend.Leader(m.ctx(ctx))
}

func (m *mutantClient) Campaign(ctx context.Context, cand core.Candidate) (core.Leadership, error) {
	if ctx.Err() != nil {
		// Only its own wait is bounded: an ended context campaigns.
		ctx = m.ctx(ctx)
	}
	return m.MetadataBackend.Campaign(ctx, cand)
}

// TestSuiteReachesThePlugin runs the context and Close properties on the
// seeded-bug plugins (in process, through the whole shim) twice: with the
// host answering (Plugin.NewClient, as the suite ran before), where the
// bugs pass, and with the conformance client, where each must be caught
// by its catchers.
func TestSuiteReachesThePlugin(t *testing.T) {
	for _, tt := range []struct {
		bug      string
		catchers []string
	}{
		{bugIgnoresEndedContext, []string{"Context/CancelledReads", "Context/CancelledWrite", "Context/Deadline", "Election/Campaign/CancelledContext"}},
		{bugServesAfterClose, []string{"Closed/CallsFail"}},
	} {
		t.Run(tt.bug, func(t *testing.T) {
			run := "^(" + strings.Join(tt.catchers, "|") + ")$"
			for _, hostAnswers := range []bool{true, false} {
				h := plugintest.InProcessHarness(t, func() core.Provider {
					return &mutantProvider{Provider: memory.NewProvider(memory.StoreOptions{}), bug: tt.bug}
				}, plugintest.Options{HostAnswers: hostAnswers})
				results, err := conformance.RunStandalone(h, conformance.StandaloneOptions{Run: run})
				if err != nil {
					t.Fatal(err)
				}
				if len(results) != len(tt.catchers) {
					t.Fatalf("ran %d properties, want %d", len(results), len(tt.catchers))
				}
				for _, r := range results {
					switch {
					case hostAnswers && r.Status != conformance.Passed:
						t.Errorf("host answering: %s %s (%v); want it passed: the host hides the bug", r.Name, r.Status, r.Messages)
					case !hostAnswers && r.Status != conformance.Failed:
						t.Errorf("conformance client: %s %s; want it failed: the bug is in the plugin", r.Name, r.Status)
					case !hostAnswers:
						t.Logf("caught by %s: %s", r.Name, strings.Join(r.Messages, "; "))
					}
				}
			}
		})
	}
}

// slowWithdrawProvider is the memory provider whose campaigns take 300 ms
// to withdraw once their context ends (as a backend that must delete its
// candidacy over the network does): correct, but slow.
type slowWithdrawProvider struct{ *memory.Provider }

func (p slowWithdrawProvider) NewClient(ctx context.Context, opts core.ClientOptions) (core.MetadataBackend, error) {
	c, err := p.Provider.NewClient(ctx, opts)
	return slowWithdrawClient{c}, err
}

type slowWithdrawClient struct{ core.MetadataBackend }

func (c slowWithdrawClient) Unwrap() core.MetadataBackend { return c.MetadataBackend }

func (c slowWithdrawClient) Campaign(ctx context.Context, cand core.Candidate) (core.Leadership, error) {
	inner, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(300*time.Millisecond, cancel) })
	defer stop()
	return c.MetadataBackend.Campaign(inner, cand)
}

// TestCancelledCampaignWithdrawnInPlugin: the host's Campaign reports a
// cancellation only once the campaign has ended in the plugin, so a
// resignation right after it cannot elect the cancelled candidate however
// slowly the backend withdraws.
func TestCancelledCampaignWithdrawnInPlugin(t *testing.T) {
	h := plugintest.InProcessHarness(t, func() core.Provider {
		return slowWithdrawProvider{memory.NewProvider(memory.StoreOptions{})}
	}, plugintest.Options{})
	results, err := conformance.RunStandalone(h, conformance.StandaloneOptions{Run: "^Election/Campaign/CancelWithdraws$"})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 || results[0].Status != conformance.Passed {
		t.Fatalf("results %+v, want Election/Campaign/CancelWithdraws passed", results)
	}
}
