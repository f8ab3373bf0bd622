package migrate

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/internal/zktest"
	"github.com/metaplane/metaplane/plugins"
)

func launchPlugin(t *testing.T, name string, cfg map[string]string) (*plugins.Plugin, core.MetadataBackend) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := plugins.Launch(ctx, plugins.LaunchOptions{Path: testutil.Binary(t, "metaplane-backend-"+name), Config: cfg,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxFailures: 1, StartTimeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("launch %s: %v", name, err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := p.NewClient(ctx, core.ClientOptions{Name: "migrate-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c
}

// TestLiveRevertsWhenTheTargetDies: a real ZooKeeper source with a leader
// writing, a real Raft plugin process as the target, SIGKILLed after the
// fence: the migration fails and reverts (the source's marker and fence
// are gone, a leader is elected and its fenced writes succeed again).
func TestLiveRevertsWhenTheTargetDies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper and plugin processes")
	}
	srv := zktest.StartServer(t)
	_, src := launchPlugin(t, "zookeeper", map[string]string{
		"zookeeper.address": srv.ConnectString(), "zookeeper.path.root": "/revert-test", "zookeeper.client.session-timeout": "4s"})
	dstPlugin, dst := launchPlugin(t, "raft", map[string]string{
		"coordinator.raft.dir": filepath.Join(t.TempDir(), "raft"), "coordinator.raft.port": strconv.Itoa(testutil.FreePort(t)),
		"coordinator.raft.logdb.profile": "tiny"})
	ctx := context.Background()
	for _, p := range []string{"/metadata/databases/db1", "/metadata/databases/db2/tables/t1"} {
		if _, _, err := core.Create(ctx, src, p, []byte(p), core.CreateOptions{MakeParents: true}); err != nil {
			t.Fatal(err)
		}
	}
	w := startWriter(t, src)
	w.waitAcked(t, 20)
	_, err := Live(ctx, src, dst, LiveOptions{MaxRounds: 2, FenceWait: 20 * time.Second, BeforeFinal: func(context.Context) error {
		return syscall.Kill(dstPlugin.Pid(), syscall.SIGKILL)
	}})
	if err == nil || !strings.Contains(err.Error(), "reverted") || !strings.Contains(err.Error(), "fence was removed") {
		t.Fatalf("live with the target killed: %v, want a reverted failure", err)
	}
	t.Log(err)
	rs, gerr := src.GetMany(ctx, []string{catalog.MigrationPath, catalog.MigrationFencePath}, core.ReadOptions{})
	if gerr != nil || !errors.Is(rs[0].Err, core.ErrNotFound) || !errors.Is(rs[1].Err, core.ErrNotFound) {
		t.Fatalf("after the revert: %v, marker %v, fence %v; want both gone", gerr, rs[0].Err, rs[1].Err)
	}
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	lead, err := src.Campaign(lctx, core.Candidate{ID: "after-revert"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := core.Create(ctx, src, "/metadata/after-revert", nil, core.CreateOptions{Fence: lead.Fence()}); err != nil {
		t.Errorf("a fenced write on the reverted source: %v", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, data := range w.acked {
		if data == "" {
			continue
		}
		if _, err := core.Get(ctx, src, p); err != nil {
			t.Errorf("%s, acked on the source, is gone after the revert: %v", p, err)
		}
	}
}

// TestLiveFromRealRaft: a real Raft plugin process as the live source,
// with a fenced writer leading it until the fence, into the memory
// backend: the Raft stats carry no children's revision (every parent is
// listed in a diff round, and a final pass is consistent only when the
// source's revision held still, else one snapshot is read); every write
// acked before the fence is on the target, and the target equals the
// source.
func TestLiveFromRealRaft(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft plugin process")
	}
	_, src := launchPlugin(t, "raft", map[string]string{
		"coordinator.raft.dir": filepath.Join(t.TempDir(), "raft"), "coordinator.raft.port": strconv.Itoa(testutil.FreePort(t)),
		"coordinator.raft.logdb.profile": "tiny"})
	ctx := context.Background()
	for _, p := range []string{"/metadata/databases/db1/tables/t1", "/metadata/databases/db2"} {
		if _, _, err := core.Create(ctx, src, p, []byte(p), core.CreateOptions{MakeParents: true}); err != nil {
			t.Fatal(err)
		}
	}
	w := startWriter(t, src)
	w.waitAcked(t, 20)
	dst := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "dst"})
	defer dst.Close()
	var progress strings.Builder
	res, err := Live(ctx, src, dst, LiveOptions{Progress: &progress, MaxRounds: 3, QuietNodes: 5, FenceWait: 20 * time.Second})
	if err != nil {
		t.Fatalf("live from Raft: %v\n%s", err, progress.String())
	}
	<-w.done
	t.Log(progress.String())
	if len(res.Validate.Differences) != 0 || w.refused == 0 {
		t.Errorf("result %+v, %d writes refused after the fence", res, w.refused)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, data := range w.acked {
		got, err := core.Get(ctx, dst, p)
		switch {
		case data == "" && !errors.Is(err, core.ErrNotFound):
			t.Errorf("%s deleted on the source (acked), on the target: %v", p, err)
		case data != "" && (err != nil || string(got.Data) != data):
			t.Errorf("%s acked as %q on the source; on the target %q, %v", p, data, got.Data, err)
		}
	}
	want, err := src.Snapshot(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range want.Nodes {
		if n.Path == "/" || isMarker(n.Path) || n.Stat.EphemeralOwner != 0 || n.Path == catalog.CoordinatorEpochPath {
			continue
		}
		if got, err := core.Get(ctx, dst, n.Path); err != nil || string(got.Data) != string(n.Data) {
			t.Errorf("%s: %q on the source, %q (%v) on the target", n.Path, n.Data, got.Data, err)
		}
	}
}
