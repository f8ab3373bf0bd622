package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// The suite's own mutation test: the memory backend with one seeded bug
// each, of the kinds a backend author plausibly writes. Each must be
// caught: some property fails, among them the one named as its catcher,
// so that a property weakened later is noticed. docs/conformance.md
// reports the kill rate.

// mutant is a memory client with one seeded bug. It implements the
// required contract and Unwrap, so core.Optional still finds the memory
// backend's optional parts.
type mutant struct {
	core.MetadataBackend
	bug    string
	closed <-chan struct{} // closed with the store
	stale  *staleCache     // the store's (bugStaleReads)
	commit chan struct{}   // the store's commit lock (bugWatchBlocksWriters)
	asked  time.Duration   // the session timeout asked for (bugTimeoutIgnored)
}

func (m *mutant) Unwrap() core.MetadataBackend { return m.MetadataBackend }

const (
	// bugFrozenModifyTime: a node's modify time stays its create time.
	bugFrozenModifyTime = "frozen modify time"
	// bugSuffixFromChildCount: the sequential suffix is the parent's
	// number of children, so it repeats after deletes.
	bugSuffixFromChildCount = "sequential suffix from the number of children"
	// bugSnapshotWalk: Snapshot reads node by node, each read at its own
	// revision (a change under the prefix, when one comes, lands between
	// two reads), and labels the result with the revision before the walk.
	bugSnapshotWalk = "snapshot not at one revision"
	// bugStreamMixesRevisions: a streamed snapshot reads each page from a
	// snapshot taken anew, labelled with the first page's revision.
	bugStreamMixesRevisions = "streamed snapshot mixing revisions"
	// bugCreateStatNoLength: a create's result stat has no data length.
	bugCreateStatNoLength = "create stat without data length"
	// bugStaleReads: reads are served from a cache that a client of the
	// store refreshes at most once a second (as a follower that serves
	// reads without asking the leader): the negative control of the
	// linearizability check, which must reject it in every run.
	bugStaleReads = "stale reads"
	// bugWatchBlocksWriters: watch events are handed to the consumers
	// under the store's commit lock, so a watcher that does not read
	// holds back every writer.
	bugWatchBlocksWriters = "a slow watcher blocks writers"
	// bugChildrenHangs: Children ignores its context and returns only
	// when the store is closed (as a plugin's call returns when its
	// process is killed).
	bugChildrenHangs = "Children hangs"
	// bugTimeoutIgnored: the client reports the session timeout it was
	// asked for but its session lives by the store's default (10 s).
	bugTimeoutIgnored = "session timeout ignored"
)

// Session reports the asked timeout under bugTimeoutIgnored.
func (m *mutant) Session() core.SessionInfo {
	si := m.MetadataBackend.Session()
	if m.bug == bugTimeoutIgnored && m.asked > 0 {
		si.Timeout = m.asked
	}
	return si
}

func (m *mutant) freeze(st *core.Stat) {
	if m.bug == bugFrozenModifyTime {
		st.ModifyTime = st.CreateTime
	}
}

func (m *mutant) GetMany(ctx context.Context, paths []string, opts core.ReadOptions) ([]core.GetResult, error) {
	if m.bug == bugStaleReads {
		return (&staleReads{MetadataBackend: m.MetadataBackend, cache: m.stale}).GetMany(ctx, paths, opts)
	}
	rs, err := m.MetadataBackend.GetMany(ctx, paths, opts)
	for i := range rs {
		m.freeze(&rs[i].Node.Stat)
	}
	return rs, err
}

func (m *mutant) Children(ctx context.Context, path string, opts core.ReadOptions) ([]string, core.Stat, error) {
	if m.bug == bugChildrenHangs {
		<-m.closed
		return nil, core.Stat{}, core.ErrClosed
	}
	names, st, err := m.MetadataBackend.Children(ctx, path, opts)
	m.freeze(&st)
	return names, st, err
}

func (m *mutant) Watch(ctx context.Context, prefix string, from int64) (<-chan core.WatchResponse, error) {
	ch, err := m.MetadataBackend.Watch(ctx, prefix, from)
	if err != nil || m.bug != bugWatchBlocksWriters {
		return ch, err
	}
	out := make(chan core.WatchResponse)
	go func() {
		defer close(out)
		for r := range ch {
			m.commit <- struct{}{}
			select {
			case out <- r:
			case <-ctx.Done():
			}
			<-m.commit
		}
	}()
	return out, nil
}

func (m *mutant) Txn(ctx context.Context, ops []core.Op, opts core.TxnOptions) (core.TxnResult, error) {
	if m.bug == bugWatchBlocksWriters {
		select {
		case m.commit <- struct{}{}:
			defer func() { <-m.commit }()
		case <-ctx.Done():
			return core.TxnResult{}, ctx.Err()
		}
	}
	if m.bug == bugSuffixFromChildCount {
		ops = append([]core.Op(nil), ops...)
		for i, op := range ops {
			if op.Type != core.OpCreate || !op.Mode.IsSequential() {
				continue
			}
			parent := op.Path[:strings.LastIndexByte(op.Path, '/')]
			if parent == "" {
				parent = "/"
			}
			names, _, _ := m.MetadataBackend.Children(ctx, parent, core.ReadOptions{})
			ops[i].Path = fmt.Sprintf("%s%010d", op.Path, len(names))
			ops[i].Mode = core.Persistent
			if op.Mode.IsEphemeral() {
				ops[i].Mode = core.Ephemeral
			}
		}
	}
	res, err := m.MetadataBackend.Txn(ctx, ops, opts)
	for i := range res.Results {
		m.freeze(&res.Results[i].Stat)
		if m.bug == bugCreateStatNoLength && res.Results[i].Type == core.OpCreate {
			res.Results[i].Stat.DataLength = 0
		}
	}
	return res, err
}

// StreamSnapshot is the memory backend's, or under bugStreamMixesRevisions
// pages read from snapshots taken anew.
func (m *mutant) StreamSnapshot(ctx context.Context, prefix string, pageBytes int, fn func(rev int64, nodes []core.Node) error) error {
	if m.bug == bugStreamMixesRevisions {
		return testutil.MixedRevisionStream(ctx, m.MetadataBackend, prefix, pageBytes, fn)
	}
	ss, _ := core.Optional[core.SnapshotStreamer](m.MetadataBackend)
	return ss.StreamSnapshot(ctx, prefix, pageBytes, fn)
}

func (m *mutant) Snapshot(ctx context.Context, prefix string) (core.Snapshot, error) {
	if m.bug != bugSnapshotWalk {
		s, err := m.MetadataBackend.Snapshot(ctx, prefix)
		for i := range s.Nodes {
			m.freeze(&s.Nodes[i].Stat)
		}
		return s, err
	}
	st, err := m.Status(ctx)
	if err != nil {
		return core.Snapshot{}, err
	}
	out := core.Snapshot{Revision: st.Revision}
	// A walk over a busy store spans commits; the memory store's is too
	// quick to, so between two reads the walk waits for the next change
	// under the prefix (at most 20 ms: none may come).
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changes, err := m.MetadataBackend.Watch(wctx, prefix, 0)
	if err != nil {
		return core.Snapshot{}, err
	}
	var walk func(path string) error
	walk = func(path string) error {
		rs, err := m.MetadataBackend.GetMany(ctx, []string{path}, core.ReadOptions{})
		if err != nil {
			return err
		}
		select {
		case <-changes:
		case <-time.After(20 * time.Millisecond):
		}
		if errors.Is(rs[0].Err, core.ErrNotFound) {
			return nil
		}
		if rs[0].Err != nil {
			return rs[0].Err
		}
		out.Nodes = append(out.Nodes, rs[0].Node)
		names, _, err := m.MetadataBackend.Children(ctx, path, core.ReadOptions{})
		if errors.Is(err, core.ErrNotFound) {
			return nil
		}
		for _, n := range names {
			if err := walk(core.JoinPath(path, n)); err != nil {
				return err
			}
		}
		return err
	}
	if err := walk(prefix); err != nil {
		return core.Snapshot{}, err
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Path < out.Nodes[j].Path })
	return out, nil
}

type mutantStore struct {
	s      *memory.Store
	bug    string
	closed <-chan struct{}
	stale  *staleCache
	commit chan struct{}
}

func (m mutantStore) NewClient(t T, opts ClientOptions) core.MetadataBackend {
	co := core.ClientOptions{SessionTimeout: opts.SessionTimeout}
	if m.bug == bugTimeoutIgnored {
		co.SessionTimeout = 0
	}
	c := m.s.NewClient(co)
	t.Cleanup(func() { c.Close() })
	return &mutant{MetadataBackend: c, bug: m.bug, closed: m.closed, stale: m.stale, commit: m.commit, asked: opts.SessionTimeout}
}

// silencingMutantStore is a mutantStore that can silence a client
// (Silencer), for the bugs only Session/Timeout/Honoured catches; the
// others do without it, so that their runs of the whole suite do not
// wait out its session timeouts.
type silencingMutantStore struct{ mutantStore }

func (m silencingMutantStore) Silence(t T, c core.MetadataBackend) {
	c.(*mutant).MetadataBackend.(*memory.Backend).PauseHeartbeats()
}

func (m mutantStore) ExpireSession(t T, c core.MetadataBackend) {
	se, ok := core.Optional[core.SessionExpirer](c)
	if !ok {
		t.Fatalf("client %T offers no SessionExpirer", c)
	}
	if err := se.ExpireSession(context.Background()); err != nil {
		t.Fatalf("expire: %v", err)
	}
}

func TestSuiteCatchesMutants(t *testing.T) {
	for _, tt := range []struct {
		bug     string
		catcher string // a property that must fail
		run     string // the properties to run ("": all)
		timeout time.Duration
		msg     string // in the catcher's messages
		runs    int    // how many runs (0: 1), each of which must catch it
		all     bool   // every property run must fail, not only the catcher
	}{
		{bug: bugFrozenModifyTime, catcher: "Stat/Set/Complete"},
		{bug: bugSuffixFromChildCount, catcher: "Create/Sequential/NotReusedAfterDelete"},
		{bug: bugSnapshotWalk, catcher: "Snapshot/ConcurrentWriters"},
		{bug: bugStreamMixesRevisions, catcher: "Snapshot/Streamed/ConcurrentWriters", run: "^Snapshot/Streamed/ConcurrentWriters$", runs: 3},
		{bug: bugCreateStatNoLength, catcher: "Stat/Create/Complete"},
		// The negative controls of the linearizability check: each run
		// of both properties must reject the stale reads.
		{bug: bugStaleReads, catcher: "Concurrency/Linearizable", run: "^Concurrency/Linearizable", runs: 3, all: true},
		{bug: bugWatchBlocksWriters, catcher: "Watch/SlowConsumer", run: "^Watch/SlowConsumer$", timeout: 2 * time.Second},
		// A hang fails its property at the deadline, naming the call.
		{bug: bugChildrenHangs, catcher: "Read/Children/Sorted", run: "^Read/Children/Sorted$", timeout: time.Second, msg: "timed out after 1s, waiting in: conformance.(*mutant).Children"},
		{bug: bugTimeoutIgnored, catcher: "Session/Timeout/Honoured", run: "^Session/Timeout/", msg: "ephemeral still there"},
	} {
		t.Run(tt.bug, func(t *testing.T) {
			h := Harness{Name: "memory with " + tt.bug, NewStore: func(t T) Store {
				s := memory.NewStore(memory.StoreOptions{})
				closed := make(chan struct{})
				t.Cleanup(func() { close(closed); s.Close() })
				stale := newStaleCache()
				ms := mutantStore{s: s, bug: tt.bug, closed: closed, stale: stale, commit: make(chan struct{}, 1)}
				if tt.bug == bugTimeoutIgnored {
					return silencingMutantStore{ms}
				}
				return ms
			}}
			for run := 0; run < max(tt.runs, 1); run++ {
				results, err := RunStandalone(h, StandaloneOptions{Run: tt.run, Timeout: tt.timeout})
				if err != nil {
					t.Fatal(err)
				}
				var failed []string
				for _, r := range results {
					if r.Status == Failed {
						failed = append(failed, r.Name)
					} else if tt.all {
						t.Errorf("run %d: %s %s, want it failed", run, r.Name, r.Status)
					}
					if r.Name == tt.catcher && tt.msg != "" && !strings.Contains(strings.Join(r.Messages, "\n"), tt.msg) {
						t.Errorf("%s: messages %q, want one containing %q", r.Name, r.Messages, tt.msg)
					}
				}
				t.Logf("run %d: caught by %d properties: %v", run, len(failed), failed)
				if !slices.Contains(failed, tt.catcher) {
					t.Errorf("run %d: %s is not caught by %s (failed: %v)", run, tt.bug, tt.catcher, failed)
				}
			}
		})
	}
}
