package migrate

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/core"
)

// source builds a memory store with persistent nodes at several versions,
// a sequential family with a gap, and an ephemeral.
func source(t *testing.T) core.MetadataBackend {
	t.Helper()
	ctx := context.Background()
	b := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "src"})
	t.Cleanup(func() { b.Close() })
	mk := func(p string, data string, mode core.CreateMode) string {
		t.Helper()
		got, _, err := core.Create(ctx, b, p, []byte(data), core.CreateOptions{Mode: mode, MakeParents: true})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	mk("/metadata/databases/db1", `{"v":1}`, core.Persistent)
	mk("/metadata/databases/db1/tables/t1", `{"t":1}`, core.Persistent)
	for i := 0; i < 3; i++ {
		if _, err := core.Set(ctx, b, "/metadata/databases/db1", []byte(`{"v":2}`), core.AnyVersion, core.Fence{}); err != nil {
			t.Fatal(err)
		}
	}
	s0 := mk("/changes/acl_", "a", core.PersistentSequential)
	mk("/changes/acl_", "b", core.PersistentSequential)
	mk("/changes/acl_", "c", core.PersistentSequential)
	if err := core.Delete(ctx, b, s0, core.AnyVersion, core.Fence{}); err != nil {
		t.Fatal(err)
	}
	mk("/tabletservers/ids/1", "live", core.Ephemeral)
	return b
}

func roundTrip(t *testing.T, tr *Tree) *Tree {
	t.Helper()
	var buf bytes.Buffer
	if err := tr.Write(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestExportImportValidate: a tree exported from one store and imported
// into an empty one through its Importer has every persistent node with
// the same data and version, no ephemeral, and a sequential create on the
// target never reuses a suffix the source handed out.
func TestExportImportValidate(t *testing.T) {
	ctx := context.Background()
	src := source(t)
	tr := export(t, src)
	tr = roundTrip(t, tr)
	paths := map[string]Node{}
	for _, n := range tr.Nodes {
		paths[n.Path] = n
	}
	if _, ok := paths["/tabletservers/ids/1"]; ok {
		t.Error("the export holds an ephemeral node")
	}
	if _, ok := paths["/"]; ok {
		t.Error("the export holds the root")
	}
	if n := paths["/metadata/databases/db1"]; n.Version != 3 || string(n.Data) != `{"v":2}` {
		t.Errorf("db1 exported as %+v, want version 3", n)
	}
	if n := paths["/changes"]; n.NextSequence != 3 {
		t.Errorf("/changes next sequence %d, want 3 (after suffixes 1 and 2)", n.NextSequence)
	}

	dst := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "dst"})
	defer dst.Close()
	var progress bytes.Buffer
	res, err := Import(ctx, dst, tr, Options{Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Bulk || !res.KeptVersions || res.Nodes != len(tr.Nodes) || res.Batches != 1 {
		t.Errorf("import result %+v, want every node in one bulk batch with versions", res)
	}
	if !strings.Contains(progress.String(), "imported") {
		t.Errorf("no progress line: %q", progress.String())
	}
	v, err := Validate(ctx, dst, tr, true)
	if err != nil || len(v.Differences) != 0 {
		t.Fatalf("validate: %+v, %v; want no difference", v, err)
	}
	got, _, err := core.Create(ctx, dst, "/changes/acl_", nil, core.CreateOptions{Mode: core.PersistentSequential})
	if err != nil || got <= "/changes/acl_0000000002" {
		t.Errorf("a sequential create on the target got %s (%v): a suffix the source used", got, err)
	}
	// The source is untouched: the tree changed nothing there.
	if again := export(t, src); len(again.Nodes) != len(tr.Nodes) {
		t.Errorf("the source changed: %d nodes, then %d", len(tr.Nodes), len(again.Nodes))
	}
}

// TestImportRefusesANonEmptyTargetAndResumes: an import into a store that
// holds nodes writes nothing; --resume completes an import that stopped
// half way and refuses one whose present nodes differ.
func TestImportRefusesANonEmptyTargetAndResumes(t *testing.T) {
	ctx := context.Background()
	tr := export(t, source(t))
	dst := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "dst"})
	defer dst.Close()
	// Half an import: the first three nodes.
	half := &Tree{Header: tr.Header, Nodes: tr.Nodes[:3]}
	if _, err := Import(ctx, dst, half, Options{}); err != nil {
		t.Fatal(err)
	}
	before, _ := dst.Snapshot(ctx, "/")
	if _, err := Import(ctx, dst, tr, Options{}); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("import into a non-empty target: %v, want ErrNotEmpty", err)
	}
	if after, _ := dst.Snapshot(ctx, "/"); after.Revision != before.Revision {
		t.Fatalf("a refused import wrote: revision %d -> %d", before.Revision, after.Revision)
	}
	res, err := Import(ctx, dst, tr, Options{Resume: true})
	if err != nil || res.Skipped != 3 || res.Nodes != len(tr.Nodes)-3 {
		t.Fatalf("resume: %+v, %v; want 3 skipped and the rest written", res, err)
	}
	if v, _ := Validate(ctx, dst, tr, true); len(v.Differences) != 0 {
		t.Fatalf("after resume: %+v", v.Differences)
	}
	// A target whose present node differs is not this import.
	other := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "other"})
	defer other.Close()
	if _, _, err := core.Create(ctx, other, tr.Nodes[0].Path, []byte("something else"), core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Import(ctx, other, tr, Options{Resume: true}); err == nil || !strings.Contains(err.Error(), tr.Nodes[0].Path) {
		t.Fatalf("resume onto other data: %v, want a conflict naming %s", err, tr.Nodes[0].Path)
	}
}

// plainBackend hides the memory backend's Importer (no Unwrap): a target
// that only has the required contract.
type plainBackend struct{ core.MetadataBackend }

func (p plainBackend) Capabilities() core.Capabilities {
	c := p.MetadataBackend.Capabilities()
	c.Import, c.ImportKeepsVersions = false, false
	return c
}

// TestImportWithoutImporter: a target without an Importer gets the tree
// through plain creates in batches: the data validates, the versions
// restart (and Validate with versions says so).
func TestImportWithoutImporter(t *testing.T) {
	ctx := context.Background()
	tr := export(t, source(t))
	dst := plainBackend{memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "dst"})}
	defer dst.Close()
	res, err := Import(ctx, dst, tr, Options{BatchBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Bulk || res.KeptVersions || res.Nodes != len(tr.Nodes) || res.Batches < 2 {
		t.Errorf("result %+v, want plain creates of every node, split by the 1-byte batch bound", res)
	}
	if v, _ := Validate(ctx, dst, tr, false); len(v.Differences) != 0 {
		t.Errorf("data differs: %+v", v.Differences)
	}
	v, _ := Validate(ctx, dst, tr, true)
	if len(v.Differences) != 1 || v.Differences[0].What != "version" || v.Differences[0].Path != "/metadata/databases/db1" {
		t.Errorf("with versions: %+v, want db1's version named", v.Differences)
	}
	// Plain creates do not carry the sequential counter: the import moves
	// it on, so a sequential create never reuses the source's suffixes.
	got, _, err := core.Create(ctx, dst, "/changes/acl_", nil, core.CreateOptions{Mode: core.PersistentSequential})
	if err != nil || got <= "/changes/acl_0000000002" {
		t.Errorf("a sequential create on the target got %s (%v): a suffix the source used", got, err)
	}
}

// TestValidateNamesEveryKindOfDifference: missing, extra and changed
// nodes are each reported.
func TestValidateNamesEveryKindOfDifference(t *testing.T) {
	ctx := context.Background()
	tr := export(t, source(t))
	dst := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "dst"})
	defer dst.Close()
	if _, err := Import(ctx, dst, tr, Options{}); err != nil {
		t.Fatal(err)
	}
	core.Set(ctx, dst, "/metadata/databases/db1/tables/t1", []byte("changed"), core.AnyVersion, core.Fence{})
	core.Delete(ctx, dst, "/changes/acl_0000000002", core.AnyVersion, core.Fence{})
	core.Create(ctx, dst, "/stray", nil, core.CreateOptions{})
	v, err := Validate(ctx, dst, tr, false)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, d := range v.Differences {
		kinds[d.Path] = d.What
	}
	want := map[string]string{"/metadata/databases/db1/tables/t1": "data", "/changes/acl_0000000002": "missing", "/stray": "extra"}
	for p, w := range want {
		if kinds[p] != w {
			t.Errorf("%s: %q, want %q (all: %+v)", p, kinds[p], w, v.Differences)
		}
	}
}

// TestReadRefusesBadFiles: a truncated file, a flipped byte, a node
// before its parent and a foreign file are refused with ErrBadFile.
func TestReadRefusesBadFiles(t *testing.T) {
	tr := export(t, source(t))
	var buf bytes.Buffer
	if err := tr.Write(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	lines := bytes.SplitAfter(good, []byte("\n"))
	flipped := append([]byte(nil), good...)
	i := bytes.Index(flipped, []byte(`"version":3`))
	flipped[i+10] = '4'
	swapped := bytes.Join([][]byte{lines[0], lines[2], lines[1]}, nil)
	for name, b := range map[string][]byte{
		"truncated":       good[:len(good)-len(lines[len(lines)-2])-5],
		"no trailer":      bytes.Join(lines[:len(lines)-2], nil),
		"flipped byte":    flipped,
		"child first":     append(swapped, bytes.Join(lines[3:], nil)...),
		"not a tree file": []byte(`{"hello":"world"}` + "\n"),
		"empty":           nil,
	} {
		if _, err := Read(bytes.NewReader(b)); !errors.Is(err, ErrBadFile) {
			t.Errorf("%s: %v, want ErrBadFile", name, err)
		}
	}
}

func TestPathOrderPutsParentsFirst(t *testing.T) {
	if !pathLess("/a", "/a/b") || pathLess("/a/b", "/a") || !pathLess("/a/b", "/a-b") || !pathLess("/a/z", "/b") {
		t.Error("path order is not parents first, then segment by segment")
	}
}

// TestNextSequencesOnlyForFamilies: a parent is a sequential family only
// when all its children carry a 10-digit suffix; ids that happen to end in
// ten digits among other names give no counter (that would send the
// target's counter to billions).
func TestNextSequencesOnlyForFamilies(t *testing.T) {
	nodes := []core.Node{
		{Path: "/"}, {Path: "/changes"}, {Path: "/changes/acl_0000000007"}, {Path: "/changes/acl_0000000002"},
		{Path: "/requests"}, {Path: "/requests/9f1c-123456789012"}, {Path: "/requests/9f1c-abcdef"},
		{Path: "/election"}, {Path: "/election/_c_ab-latch-0000000004", Stat: core.Stat{EphemeralOwner: 5}},
	}
	got := nextSequences(nodes)
	want := map[string]int64{"/changes": 8, "/election": 5}
	if len(got) != len(want) || got["/changes"] != 8 || got["/election"] != 5 {
		t.Errorf("nextSequences: %v, want %v", got, want)
	}
}
