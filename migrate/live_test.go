package migrate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
)

// fencedWriter writes like a coordinator on src: as leader, with its
// fence, and resigning as soon as the migration fence exists. It creates
// /w/<i>, sets /w/hot on every write (its version keeps rising) and
// deletes every third node it created; acked holds what it was told
// succeeded.
type fencedWriter struct {
	mu      sync.Mutex
	acked   map[string]string // path -> data, "" deleted
	refused int
	lastSeq string // the sequential node created last (writer goroutine only)
	done    chan struct{}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func startWriter(t *testing.T, src core.MetadataBackend) *fencedWriter {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	lead, err := src.Campaign(ctx, core.Candidate{ID: "writer"})
	if err != nil {
		t.Fatal(err)
	}
	w := &fencedWriter{acked: map[string]string{}, done: make(chan struct{})}
	for _, p := range []string{"/w/hot", "/w/seq"} {
		if _, _, err := core.Create(ctx, src, p, []byte("0"), core.CreateOptions{MakeParents: true, Fence: lead.Fence()}); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		defer close(w.done)
		resigned := false
		for i := 1; ctx.Err() == nil && i < 100000; i++ {
			if !resigned {
				if rs, err := src.GetMany(ctx, []string{catalog.MigrationFencePath}, core.ReadOptions{}); err == nil && rs[0].Err == nil {
					lead.Resign(ctx)
					resigned = true
				}
			}
			p := fmt.Sprintf("/w/n%05d", i)
			ops := []core.Op{core.CreateOp(p, []byte(p), core.Persistent), core.SetOp("/w/hot", []byte(fmt.Sprint(i)), core.AnyVersion)}
			if i%3 == 0 {
				ops = append(ops, core.DeleteOp(fmt.Sprintf("/w/n%05d", i-2), core.AnyVersion))
			}
			// A sequential family whose members are deleted again.
			ops = append(ops, core.CreateOp("/w/seq/s-", nil, core.PersistentSequential))
			if w.lastSeq != "" {
				ops = append(ops, core.DeleteOp(w.lastSeq, core.AnyVersion))
			}
			res, err := src.Txn(ctx, ops, core.TxnOptions{Fence: lead.Fence()})
			if err == nil {
				w.lastSeq = res.Results[len(ops)-1-boolInt(w.lastSeq != "")].Path
			}
			w.mu.Lock()
			if err == nil {
				w.acked[p] = p
				w.acked["/w/hot"] = fmt.Sprint(i)
				if i%3 == 0 {
					w.acked[fmt.Sprintf("/w/n%05d", i-2)] = ""
				}
			} else if errors.Is(err, core.ErrFenced) {
				w.refused++
			}
			stop := resigned && w.refused >= 3
			w.mu.Unlock()
			if stop {
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

func (w *fencedWriter) waitAcked(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		w.mu.Lock()
		got := len(w.acked)
		w.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the writer acked %d writes in 30s, want %d", got, n)
		}
		select {
		case <-w.done:
			t.Fatalf("the writer stopped after %d writes", got)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestLiveUnderWrites: a live migration of a store taking fenced writes
// copies every acknowledged write (creates, sets with their versions,
// deletes), fences the writer (its writes after the fence are refused),
// validates, and leaves the source marked done and fenced; a second run
// is refused on the source's marker.
func TestLiveUnderWrites(t *testing.T) {
	ctx := context.Background()
	src := source(t)
	dst := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "dst"})
	defer dst.Close()
	w := startWriter(t, src)
	w.waitAcked(t, 50)
	var progress bytes.Buffer
	res, err := Live(ctx, src, dst, LiveOptions{Progress: &progress, MaxRounds: 5, QuietNodes: 5, FenceWait: 10 * time.Second})
	if err != nil {
		t.Fatalf("live: %v\n%s", err, progress.String())
	}
	<-w.done
	t.Log(progress.String())
	if len(res.Rounds) < 2 {
		t.Errorf("%d copy rounds, want at least 2 (the writer kept writing)", len(res.Rounds))
	}
	if w.refused == 0 {
		t.Error("no write of the writer was refused after the fence")
	}
	for p, data := range w.acked {
		rs, err := dst.GetMany(ctx, []string{p}, core.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case data == "" && !errors.Is(rs[0].Err, core.ErrNotFound):
			t.Errorf("%s deleted on the source (acked) but on the target: %v", p, rs[0].Err)
		case data != "" && (rs[0].Err != nil || string(rs[0].Node.Data) != data):
			t.Errorf("%s acked as %q on the source; on the target %q, %v", p, data, rs[0].Node.Data, rs[0].Err)
		}
	}
	srcHot, _ := core.Get(ctx, src, "/w/hot")
	dstHot, _ := core.Get(ctx, dst, "/w/hot")
	if srcHot.Stat.Version != dstHot.Stat.Version || srcHot.Stat.Version < 2 {
		t.Errorf("/w/hot: version %d on the source, %d on the target", srcHot.Stat.Version, dstHot.Stat.Version)
	}
	// The sequential family continues above every suffix the source used.
	got, _, err := core.Create(ctx, dst, "/w/seq/s-", nil, core.CreateOptions{Mode: core.PersistentSequential})
	if err != nil || got <= w.lastSeq {
		t.Errorf("a sequential create on the target got %s (%v); the source used up to %s", got, err, w.lastSeq)
	}
	if len(res.Validate.Differences) != 0 || !res.KeptVersions || res.Ephemerals != 1 || res.Nodes == 0 {
		t.Errorf("result %+v", res)
	}
	if !strings.Contains(progress.String(), "round 1:") || !strings.Contains(progress.String(), "final scan") {
		t.Errorf("progress %q", progress.String())
	}
	// The target carries no marker; the source is fenced, marked done.
	if rs, _ := dst.GetMany(ctx, []string{catalog.MigrationPath}, core.ReadOptions{}); !errors.Is(rs[0].Err, core.ErrNotFound) {
		t.Errorf("the target keeps a marker: %v", rs[0].Err)
	}
	rs, _ := src.GetMany(ctx, []string{catalog.MigrationPath, catalog.MigrationFencePath}, core.ReadOptions{})
	var m Marker
	if rs[0].Err != nil || rs[1].Err != nil || json.Unmarshal(rs[0].Node.Data, &m) != nil || m.Phase != "done" || m.Role != "source" {
		t.Errorf("the source's marker %q (%v), fence %v: want phase done and the fence", rs[0].Node.Data, rs[0].Err, rs[1].Err)
	}
	// A second run is refused, naming the marker, and changes nothing.
	other := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "other"})
	defer other.Close()
	if _, err := Live(ctx, src, other, LiveOptions{}); !errors.Is(err, ErrMigrationInProgress) || !strings.Contains(err.Error(), res.ID) {
		t.Errorf("a second run: %v, want ErrMigrationInProgress naming %s", err, res.ID)
	}
	if s, _ := other.Snapshot(ctx, "/"); len(s.Nodes) > 1 {
		t.Errorf("the refused run left %d nodes on its target", len(s.Nodes))
	}
	// Unfence removes the source's marker.
	if got, err := Unfence(ctx, src); err != nil || !strings.Contains(got, res.ID) {
		t.Errorf("unfence: %q, %v", got, err)
	}
	if rs, _ := src.GetMany(ctx, []string{catalog.MigrationPath}, core.ReadOptions{}); !errors.Is(rs[0].Err, core.ErrNotFound) {
		t.Errorf("unfence left the marker: %v", rs[0].Err)
	}
}

// TestLiveRevertsOnFailure: a failure after the fence removes the source's
// fence and marker (a leader can be elected and write again), and leaves
// the target marked failed; a run into that target is refused while the
// failed run's session lives, and once it ended a rerun empties the
// partial copy (said) and completes.
func TestLiveRevertsOnFailure(t *testing.T) {
	ctx := context.Background()
	src := source(t)
	target := memory.NewStore(memory.StoreOptions{})
	dst := target.NewClient(core.ClientOptions{Name: "dst"})
	defer dst.Close()
	boom := errors.New("injected")
	_, err := Live(ctx, src, dst, LiveOptions{BeforeFinal: func(context.Context) error { return boom }})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "reverted") {
		t.Fatalf("live: %v, want the injected error and reverted", err)
	}
	if rs, _ := src.GetMany(ctx, []string{catalog.MigrationPath, catalog.MigrationFencePath}, core.ReadOptions{}); !errors.Is(rs[0].Err, core.ErrNotFound) || !errors.Is(rs[1].Err, core.ErrNotFound) {
		t.Errorf("the source keeps its marker (%v) or fence (%v)", rs[0].Err, rs[1].Err)
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lead, err := src.Campaign(lctx, core.Candidate{ID: "after"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := core.Create(ctx, src, "/after", nil, core.CreateOptions{Fence: lead.Fence()}); err != nil {
		t.Errorf("a fenced write on the reverted source: %v", err)
	}
	var m Marker
	got, err := core.Get(ctx, dst, catalog.MigrationPath)
	if err != nil || json.Unmarshal(got.Data, &m) != nil || m.Phase != "failed" || !strings.Contains(m.Error, "injected") {
		t.Errorf("the target's marker %q (%v), want phase failed with the error", got.Data, err)
	}
	if _, err := Live(ctx, src, dst, LiveOptions{OwnerWait: 300 * time.Millisecond}); !errors.Is(err, ErrMigrationInProgress) || !strings.Contains(err.Error(), "held by a running tool") {
		t.Errorf("a run into the failed target while its run's session lives: %v, want ErrMigrationInProgress, held by a running tool", err)
	}
	// The refused run did not mark the source.
	if rs, _ := src.GetMany(ctx, []string{catalog.MigrationPath}, core.ReadOptions{}); !errors.Is(rs[0].Err, core.ErrNotFound) {
		t.Errorf("a refused run marked the source: %v", rs[0].Err)
	}
	// The failed run's session ends; a stray node in its partial copy
	// goes too, as everything below the marker's run.
	if _, _, err := core.Create(ctx, dst, "/stray", []byte("x"), core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	rerun := target.NewClient(core.ClientOptions{Name: "rerun"})
	defer rerun.Close()
	var progress bytes.Buffer
	lead.Resign(ctx)
	res, err := Live(ctx, src, rerun, LiveOptions{Progress: &progress, FenceWait: 5 * time.Second})
	if err != nil {
		t.Fatalf("the rerun into the dead run's target: %v\n%s", err, progress.String())
	}
	if !strings.Contains(progress.String(), "emptying it and taking over") || len(res.Validate.Differences) != 0 {
		t.Errorf("the rerun: %+v\n%s", res, progress.String())
	}
	if _, err := core.Get(ctx, rerun, "/stray"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("the partial copy's stray node survived the rerun: %v", err)
	}
	if _, err := core.Get(ctx, rerun, "/after"); err != nil {
		t.Errorf("the rerun did not copy the write after the revert: %v", err)
	}
}

// TestImportFencesTheTargetUntilComplete: an import that fails half way
// leaves the target fenced (no coordinator leads a partial tree); the
// resumed import completes and removes the fence.
func TestImportFencesTheTargetUntilComplete(t *testing.T) {
	ctx := context.Background()
	tr := export(t, source(t))
	dst := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "dst"})
	defer dst.Close()
	broken := &Tree{Header: tr.Header, Nodes: append(append([]Node(nil), tr.Nodes...), Node{Path: "/nowhere/orphan"})}
	if _, err := Import(ctx, dst, broken, Options{BatchBytes: 1}); err == nil {
		t.Fatal("an import of an orphan node succeeded")
	}
	if _, err := core.Get(ctx, dst, catalog.MigrationFencePath); err != nil {
		t.Fatalf("the stopped import left no fence: %v", err)
	}
	res, err := Import(ctx, dst, tr, Options{Resume: true})
	if err != nil || res.Skipped == 0 || res.Skipped+res.Nodes != len(tr.Nodes) {
		t.Fatalf("resume: %+v, %v", res, err)
	}
	if _, err := core.Get(ctx, dst, catalog.MigrationPath); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("the completed import left the marker: %v", err)
	}
	if v, err := Validate(ctx, dst, tr, true); err != nil || len(v.Differences) != 0 {
		t.Errorf("validate: %+v, %v", v, err)
	}
}

// TestLiveTakesOverFromADeadRun: a tool that died leaves its marker on
// the source, but its owner and fence (ephemeral nodes of its session) go
// with its session; a rerun says so, takes the marker over and completes,
// leaving a persistent fence that outlives the rerun's own session. A
// marker whose owner lives refuses the run.
func TestLiveTakesOverFromADeadRun(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore(memory.StoreOptions{})
	for _, p := range []string{"/a", "/a/b", "/c"} {
		if _, _, err := core.Create(ctx, store.NewClient(core.ClientOptions{Name: "seed"}), p, []byte(p), core.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	left := Marker{ID: "dead-run", Role: "source", Phase: "fenced", Peer: "memory", Started: time.Now()}
	claimAs := func(name string) *memory.Backend {
		c := store.NewClient(core.ClientOptions{Name: name})
		if _, err := c.Txn(ctx, []core.Op{
			core.CreateOp(catalog.MigrationPath, markerData(left), core.Persistent),
			core.CreateOp(MigrationOwnerPath, []byte(name), core.Ephemeral),
			core.CreateOp(catalog.MigrationFencePath, markerData(left), core.Ephemeral),
		}, core.TxnOptions{}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	alive := claimAs("alive")
	src := store.NewClient(core.ClientOptions{Name: "rerun"})
	dst := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "dst"})
	defer dst.Close()
	if _, err := Live(ctx, src, dst, LiveOptions{}); !errors.Is(err, ErrMigrationInProgress) || !strings.Contains(err.Error(), "held by a running tool") {
		t.Fatalf("a run while the owner lives: %v", err)
	}
	alive.Close() // the tool dies: its session's nodes go
	if rs, _ := src.GetMany(ctx, []string{catalog.MigrationFencePath, catalog.MigrationPath}, core.ReadOptions{}); !errors.Is(rs[0].Err, core.ErrNotFound) || rs[1].Err != nil {
		t.Fatalf("after the tool's session ended: fence %v (want gone), marker %v (want left)", rs[0].Err, rs[1].Err)
	}
	var progress bytes.Buffer
	res, err := Live(ctx, src, dst, LiveOptions{Progress: &progress})
	if err != nil {
		t.Fatalf("the rerun: %v\n%s", err, progress.String())
	}
	if !strings.Contains(progress.String(), "left by a tool that died") || !strings.Contains(progress.String(), "dead-run") {
		t.Errorf("the rerun did not say it took over the dead run's marker:\n%s", progress.String())
	}
	if res.Validate.Nodes == 0 {
		t.Errorf("result %+v", res)
	}
	src.Close()
	check := store.NewClient(core.ClientOptions{Name: "check"})
	defer check.Close()
	rs, err := check.GetMany(ctx, []string{catalog.MigrationFencePath, MigrationOwnerPath}, core.ReadOptions{})
	if err != nil || rs[0].Err != nil || rs[0].Node.Stat.EphemeralOwner != 0 {
		t.Errorf("after the cut-over and the tool's exit the source's fence is %+v (%v), want a persistent node", rs, err)
	}
	if !errors.Is(rs[1].Err, core.ErrNotFound) {
		t.Errorf("the owner outlived the tool's session: %v", rs[1].Err)
	}
}
