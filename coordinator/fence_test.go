package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/backends/raft"
	"github.com/metaplane/metaplane/backends/zookeeper"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/harness"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/internal/zktest"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// gatedBackend is a backend client whose leaderships report their loss
// only when the test releases them: it puts a coordinator in the window
// where its leadership has ended in the backend (a new leader is elected)
// but it has not noticed yet and still serves as leader. It records the
// error of every failed transaction, with the fence it carried.
type gatedBackend struct {
	core.MetadataBackend

	mu     sync.Mutex
	leads  []*gatedLeadership
	failed []failedTxn
}

type failedTxn struct {
	fence core.Fence
	err   error
}

// gatedLeadership is a real leadership whose Lost channel is the test's.
type gatedLeadership struct {
	core.Leadership
	lost     chan struct{}
	released sync.Once
}

func (l *gatedLeadership) Lost() <-chan struct{} { return l.lost }

func (l *gatedLeadership) release() { l.released.Do(func() { close(l.lost) }) }

func (g *gatedBackend) Campaign(ctx context.Context, c core.Candidate) (core.Leadership, error) {
	lead, err := g.MetadataBackend.Campaign(ctx, c)
	if err != nil {
		return nil, err
	}
	gl := &gatedLeadership{Leadership: lead, lost: make(chan struct{})}
	g.mu.Lock()
	g.leads = append(g.leads, gl)
	g.mu.Unlock()
	return gl, nil
}

func (g *gatedBackend) Txn(ctx context.Context, ops []core.Op, opts core.TxnOptions) (core.TxnResult, error) {
	res, err := g.MetadataBackend.Txn(ctx, ops, opts)
	if err != nil {
		g.mu.Lock()
		g.failed = append(g.failed, failedTxn{fence: opts.Fence, err: err})
		g.mu.Unlock()
	}
	return res, err
}

func (g *gatedBackend) lead() *gatedLeadership {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.leads) == 0 {
		return nil
	}
	return g.leads[len(g.leads)-1]
}

func (g *gatedBackend) failures() []failedTxn {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]failedTxn(nil), g.failed...)
}

func (g *gatedBackend) releaseAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, l := range g.leads {
		l.release()
	}
}

// fenceStore opens clients of one store of a backend, each with a session
// of its own.
type fenceStore = coordinator.Opener

// fenceBackends starts one store of each backend in-process: the memory
// store, a single-voter Raft member (Dragonboat and Pebble in t.TempDir()),
// and a real ZooKeeper server (skipped without one, failed under CI=true).
func fenceBackends() []struct {
	name  string
	start func(t *testing.T) fenceStore
} {
	return []struct {
		name  string
		start func(t *testing.T) fenceStore
	}{
		{"memory", func(t *testing.T) fenceStore {
			s := memory.NewStore(memory.StoreOptions{})
			t.Cleanup(func() { s.Close() })
			return func(ctx context.Context) (core.MetadataBackend, error) {
				return s.NewClient(core.ClientOptions{SessionTimeout: 2 * time.Second}), nil
			}
		}},
		{"raft", func(t *testing.T) fenceStore {
			dir := t.TempDir()
			p := raft.NewProvider(raft.Options{
				Voters: []raft.Voter{{ID: 1, Address: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))}}, NodeID: 1,
				Dir: filepath.Join(dir, "raft"), Heartbeat: 50 * time.Millisecond, ElectionTimeout: 400 * time.Millisecond,
				FirstElectionTimeout: 100 * time.Millisecond, CatchupTimeout: 5 * time.Second,
				ProposalTimeout: 3 * time.Second, SessionTimeout: 2 * time.Second,
				LogDBProfile: raft.LogDBTiny, Logf: func(string, ...any) {},
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := p.Start(ctx, nil); err != nil {
				t.Fatalf("start the raft member: %v", err)
			}
			t.Cleanup(func() { p.Close() })
			return func(ctx context.Context) (core.MetadataBackend, error) {
				return p.NewClient(ctx, core.ClientOptions{SessionTimeout: 2 * time.Second})
			}
		}},
		{"zookeeper", func(t *testing.T) fenceStore {
			opts := zookeeper.Options{
				Address: zktest.Shared(t).ConnectString(), Root: zktest.UniqueRoot(t),
				SessionTimeout: 4 * time.Second, ConnectionTimeout: 10 * time.Second, RetryWait: 100 * time.Millisecond,
			}
			return func(ctx context.Context) (core.MetadataBackend, error) {
				return zookeeper.Open(ctx, opts, core.ClientOptions{})
			}
		}},
	}
}

// TestStaleLeaderWritesAreFenced puts the leader coordinator in the window
// between losing its leadership in the backend and noticing it (its
// backend client reports the loss only when the test says so): a new
// leader is elected while the old one still serves. Every write the old
// leader makes then carries its old leadership's fence, and the backend
// itself refuses it with core.ErrFenced (the old coordinator answers
// NOT_LEADER, code 65); the tree is unchanged. The same body runs on the
// memory, Raft and ZooKeeper backends. The catalog with the stale fence,
// driven directly, is refused the same way.
func TestStaleLeaderWritesAreFenced(t *testing.T) {
	for _, bk := range fenceBackends() {
		t.Run(bk.name, func(t *testing.T) {
			open := bk.start(t)
			staleLeaderScenario(t, open)
		})
	}
}

func staleLeaderScenario(t *testing.T, open fenceStore) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var gatedMu sync.Mutex
	var gated []*gatedBackend
	t.Cleanup(func() {
		gatedMu.Lock()
		defer gatedMu.Unlock()
		for _, g := range gated {
			g.releaseAll()
		}
	})
	a := startCoordinatorOn(t, func(ctx context.Context) (core.MetadataBackend, error) {
		b, err := open(ctx)
		if err != nil {
			return nil, err
		}
		g := &gatedBackend{MetadataBackend: b}
		gatedMu.Lock()
		gated = append(gated, g)
		gatedMu.Unlock()
		return g, nil
	})
	testutil.WaitFor(t, 30*time.Second, "the first coordinator leads", a.Srv.IsLeader)
	gatedMu.Lock()
	ga := gated[len(gated)-1]
	gatedMu.Unlock()
	oldLead := ga.lead()
	if oldLead == nil {
		t.Fatal("the leading coordinator's client recorded no leadership")
	}
	oldFence := oldLead.Fence()
	if !oldFence.Valid {
		t.Fatalf("leadership fence %+v is not valid", oldFence)
	}
	b := startCoordinatorOn(t, open)

	aAdmin := dialAdmin(t, a.Addr)
	if _, err := aAdmin.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "before"}); err != nil {
		t.Fatalf("create database on the leader: %v", err)
	}

	// End the leadership in the backend without the coordinator noticing.
	if err := oldLead.Leadership.Resign(ctx); err != nil {
		t.Fatalf("resign in the backend: %v", err)
	}
	select {
	case <-oldLead.Leadership.Lost():
	case <-ctx.Done():
		t.Fatal("the backend did not end the resigned leadership")
	}
	testutil.WaitFor(t, 30*time.Second, "the second coordinator leads", b.Srv.IsLeader)
	if !a.Srv.IsLeader() {
		t.Fatal("the old leader noticed its loss: the test would not exercise the fence")
	}
	if b.Srv.Epoch() <= oldFence.Epoch {
		t.Fatalf("new epoch %d not above the old %d", b.Srv.Epoch(), oldFence.Epoch)
	}

	reader, err := open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	before, err := reader.Snapshot(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}

	// The old leader still serves, and every write it makes is fenced.
	writes := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"CreateDatabase", func(ctx context.Context) error {
			_, err := aAdmin.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "stale"})
			return err
		}},
		{"CreateTable", func(ctx context.Context) error {
			_, err := aAdmin.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "before", Table: "t", Descriptor_: &adminv1.TableDescriptor{
				Columns: []*adminv1.Column{{Name: "k", Type: "BIGINT"}}, PrimaryKey: []string{"k"}, BucketCount: 1, ReplicationFactor: 1}})
			return err
		}},
		{"DropDatabase", func(ctx context.Context) error {
			_, err := aAdmin.DropDatabase(ctx, &adminv1.DropDatabaseRequest{Name: "before"})
			return err
		}},
		{"AlterConfigs", func(ctx context.Context) error {
			_, err := aAdmin.AlterConfigs(ctx, &adminv1.AlterConfigsRequest{Set: map[string]string{"k": "v"}})
			return err
		}},
	}
	for _, w := range writes {
		n := len(ga.failures())
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		err := w.call(wctx)
		wcancel()
		d := adminapi.DetailOf(err)
		if d == nil || d.Code != adminapi.CodeNotLeader || d.FlussErrorCode != adminapi.FlussNotCoordinatorLeader {
			t.Fatalf("%s on the stale leader: got %v (detail %+v), want NOT_LEADER (65)", w.name, err, d)
		}
		if d.LeaderAddress != "" && adminapi.HostPort(d.LeaderAddress) != b.Addr {
			t.Errorf("%s on the stale leader redirects to %s, want the new leader %s", w.name, d.LeaderAddress, b.Addr)
		}
		f := ga.failures()[n:]
		if len(f) == 0 {
			t.Fatalf("%s: refused before reaching the backend: the fence was not exercised", w.name)
		}
		for _, ft := range f {
			if !errors.Is(ft.err, core.ErrFenced) {
				t.Errorf("%s: the backend refused with %v, want core.ErrFenced", w.name, ft.err)
			}
			if ft.fence != oldFence {
				t.Errorf("%s: the write carried fence %+v, want the old leadership's %+v", w.name, ft.fence, oldFence)
			}
		}
	}
	if !a.Srv.IsLeader() {
		t.Fatal("the old leader stopped serving during the test: the writes above may not have gone through its catalog")
	}

	// The catalog layer itself, as the server drives it (the leadership's
	// fence and epoch), on a client of its own.
	stale := catalog.New(reader, catalog.Options{Fence: oldFence, Epoch: oldFence.Epoch})
	if _, err := stale.CreateDatabase(ctx, "stale2", catalog.DatabaseRegistration{}, false); !errors.Is(err, core.ErrFenced) {
		t.Fatalf("catalog with the stale fence: got %v, want core.ErrFenced", err)
	}
	if _, err := stale.AllocateIDs(ctx, "table", 1); !errors.Is(err, core.ErrFenced) {
		t.Fatalf("id allocation with the stale fence: got %v, want core.ErrFenced", err)
	}

	after, err := reader.Snapshot(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before.Nodes, after.Nodes) {
		t.Fatalf("the fenced writes changed the tree:\nbefore %s\nafter  %s", nodePaths(before.Nodes), nodePaths(after.Nodes))
	}

	// Once the old leader notices, it answers NOT_LEADER naming the new
	// leader, which serves the catalog written before the failover.
	changed := a.Srv.RoleChanged()
	ga.releaseAll()
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("the old leader did not step down")
	}
	var addr string
	testutil.WaitFor(t, 10*time.Second, "the old leader names the new one", func() bool {
		_, err := aAdmin.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "stale"})
		var ok bool
		addr, ok = adminapi.NotLeaderAddress(err)
		return ok && addr == b.Addr
	})
	names, err := dialAdmin(t, b.Addr).ListDatabases(ctx, &adminv1.ListDatabasesRequest{})
	if err != nil || !reflect.DeepEqual(names.Names, []string{"before"}) {
		t.Fatalf("databases on the new leader: %v, %v; want [before]", names, err)
	}
}

func nodePaths(nodes []core.Node) string {
	s := ""
	for _, n := range nodes {
		s += fmt.Sprintf("\n  %s v%d %q", n.Path, n.Stat.Version, n.Data)
	}
	return s
}

// startCoordinatorOn starts a coordinator whose backend clients come from
// open.
func startCoordinatorOn(t *testing.T, open coordinator.Opener) *node {
	t.Helper()
	return harness.StartCoordinator(t, nil, coordinator.Options{Open: open})
}
