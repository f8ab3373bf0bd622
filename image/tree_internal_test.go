package image

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/metaplane/metaplane/core"
)

// checkTree verifies the tree's invariants: every live node is found by
// its path; its children are sorted by name, are its children by path,
// and are counted; every chunk counts exactly the bytes of the records
// the nodes refer to; and, the tree being tidy, every chunk other than
// the current one is at least half live (own chunks wholly).
func checkTree(t *testing.T, tr *tree) {
	t.Helper()
	live := make([]int, len(tr.chunks))
	n := 0
	for i := range tr.nodes {
		id := uint32(i)
		nd := tr.nodes[id]
		if nd.ref == freeRef {
			continue
		}
		n++
		r := decode(tr.record(id))
		live[nd.ref>>32] += r.size
		p := string(r.path)
		if got, ok := tr.lookup(p); !ok || got != id {
			t.Fatalf("lookup(%s) = %d, %v; want %d", p, got, ok, id)
		}
		kids := tr.children(id)
		if len(kids) != tr.numChildren(id) {
			t.Fatalf("%s: %d children listed, %d counted", p, len(kids), tr.numChildren(id))
		}
		for j, c := range kids {
			cp := string(tr.path(c))
			if core.ParentPath(cp) != p || cp == p {
				t.Fatalf("%s lists %s as a child", p, cp)
			}
			if j > 0 && string(tr.name(kids[j-1])) >= string(tr.name(c)) {
				t.Fatalf("%s: children out of order: %s before %s", p, tr.name(kids[j-1]), tr.name(c))
			}
		}
	}
	if n != tr.n {
		t.Fatalf("%d live nodes, n says %d", n, tr.n)
	}
	if len(tr.pending) != 0 {
		t.Fatalf("%d chunks pending after a change", len(tr.pending))
	}
	for ci, c := range tr.chunks {
		if c.live != live[ci] {
			t.Fatalf("chunk %d counts %d live bytes, holds %d", ci, c.live, live[ci])
		}
		switch {
		case c.own && c.live != len(c.buf):
			t.Fatalf("own chunk %d: %d live of %d", ci, c.live, len(c.buf))
		case !c.own && ci != tr.cur && c.live*2 < len(c.buf):
			t.Fatalf("chunk %d: %d live of %d, not compacted", ci, c.live, len(c.buf))
		}
	}
}

// modelNode is a node of the reference model of TestTreeAgainstModel.
type modelNode struct {
	data []byte
	stat core.Stat
}

// TestTreeAgainstModel applies random creations, changes (data from none
// to larger than a chunk's share) and deletions of subtrees to an image
// and to a plain map, and checks that the image answers as the map does
// (GetMany, GetManyShared, Children, CountChildren, Snapshot, Len) and
// that its tree keeps its invariants, through many compactions.
func TestTreeAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	ctx := context.Background()
	im := New(Options{})
	im.install(newTree("/"), 1)
	model := map[string]*modelNode{"/": {}}
	im.applyEvents([]core.WatchEvent{{Type: core.EventCreated, Path: "/", Revision: 1}}, 1)
	names := []string{"a", "a-b", "a.c", "b", "ab", "z"}
	randPath := func() string {
		if rng.Intn(4) == 0 {
			return fmt.Sprintf("/big/n%03d", rng.Intn(150)) // a parent of many children
		}
		var b strings.Builder
		for d := rng.Intn(4); d >= 0; d-- {
			b.WriteString("/" + names[rng.Intn(len(names))])
		}
		return b.String()
	}
	randData := func() []byte {
		switch rng.Intn(5) {
		case 0:
			return nil
		case 1:
			return bytes.Repeat([]byte{byte(rng.Intn(256))}, largeRecord+rng.Intn(3000))
		default:
			return bytes.Repeat([]byte{byte(rng.Intn(256))}, rng.Intn(1500))
		}
	}
	rev := int64(1)
	for round := 0; round < 60; round++ {
		for i := 0; i < 300; i++ {
			rev++
			p := randPath()
			if _, ok := model[p]; ok && rng.Intn(3) == 0 {
				im.applyEvents([]core.WatchEvent{{Type: core.EventDeleted, Path: p, Revision: rev}}, rev)
				for q := range model {
					if core.HasPrefixPath(q, p) {
						delete(model, q)
					}
				}
				continue
			}
			st := core.Stat{Version: rng.Int63n(5), CreateRevision: rev - rng.Int63n(rev), ModifyRevision: rev,
				CreateTime: 1765000000000 + rng.Int63n(1e6), ModifyTime: 1765000000000 + rng.Int63n(1e6),
				EphemeralOwner: rng.Int63n(2) * rng.Int63(), ChildrenRevision: rng.Int63n(rev + 1)}
			data := randData()
			im.applyEvents([]core.WatchEvent{{Type: core.EventUpdated, Path: p, Data: data, Stat: st, Revision: rev}}, rev)
			for q := core.ParentPath(p); ; q = core.ParentPath(q) {
				if _, ok := model[q]; !ok {
					model[q] = &modelNode{}
				}
				if q == "/" {
					break
				}
			}
			model[p] = &modelNode{data: data, stat: st}
		}
		im.mu.Lock()
		checkTree(t, im.nodes)
		im.mu.Unlock()

		paths := make([]string, 0, len(model))
		for p := range model {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		want := func(p string) core.Stat {
			m := model[p]
			st := m.stat
			st.DataLength = int32(len(m.data))
			for q := range model {
				if q != p && core.ParentPath(q) == p {
					st.NumChildren++
				}
			}
			return st
		}
		if im.Len() != len(model) {
			t.Fatalf("round %d: %d nodes, want %d", round, im.Len(), len(model))
		}
		for _, shared := range []bool{false, true} {
			get := im.GetMany
			if shared {
				get = im.GetManyShared
			}
			res, err := get(ctx, append(slices.Clone(paths), "/missing"), core.ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range paths {
				r := res[i]
				// Shared data is nil exactly when the node's is (a copy is
				// nil when empty).
				wantNil := model[p].data == nil || !shared && len(model[p].data) == 0
				if r.Err != nil || !bytes.Equal(r.Node.Data, model[p].data) || r.Node.Stat != want(p) || (r.Node.Data == nil) != wantNil {
					t.Fatalf("round %d: %s: %+v, want %q %+v", round, p, r, model[p].data, want(p))
				}
			}
			if res[len(paths)].Err == nil {
				t.Fatalf("a missing path found: %+v", res[len(paths)])
			}
		}
		for _, p := range paths {
			var kids []string
			for _, q := range paths {
				if q != p && core.ParentPath(q) == p {
					kids = append(kids, core.BaseName(q))
				}
			}
			sort.Strings(kids)
			got, st, err := im.Children(ctx, p, core.ReadOptions{})
			if err != nil || !slices.Equal(got, kids) || st != want(p) || im.CountChildren(p) != len(kids) {
				t.Fatalf("round %d: children of %s: %v %+v %v; want %v %+v", round, p, got, st, err, kids, want(p))
			}
		}
		for _, prefix := range []string{"/", "/a", "/big"} {
			snap, err := im.SnapshotShared(ctx, prefix)
			if err != nil {
				t.Fatal(err)
			}
			var sub []string
			for _, p := range paths {
				if core.HasPrefixPath(p, prefix) {
					sub = append(sub, p)
				}
			}
			if len(snap.Nodes) != len(sub) || snap.Revision != rev {
				t.Fatalf("round %d: snapshot of %s: %d nodes at %d, want %d at %d", round, prefix, len(snap.Nodes), snap.Revision, len(sub), rev)
			}
			for i, n := range snap.Nodes {
				if n.Path != sub[i] || !bytes.Equal(n.Data, model[n.Path].data) || n.Stat != want(n.Path) || (n.Data == nil) != (model[n.Path].data == nil) {
					t.Fatalf("round %d: snapshot of %s, node %d: %s %+v; want %s %+v", round, prefix, i, n.Path, n.Stat, sub[i], want(sub[i]))
				}
			}
		}
	}
	if im.nodes.dropped < 10 {
		t.Fatalf("%d chunks dropped: the test does not exercise the arena", im.nodes.dropped)
	}
}

// TestArenaStaysBounded: a node overwritten many times, with small or
// large data, and many nodes overwritten over and over, do not make the
// arena grow beyond about twice the live records.
func TestArenaStaysBounded(t *testing.T) {
	for _, size := range []int{1000, largeRecord + 100} {
		tr := newTree("/")
		data := make([]byte, size)
		const n = 3000
		for i := 0; i < n; i++ {
			data[0] = byte(i)
			tr.set("/a/b", data, core.Stat{ModifyRevision: int64(i)}, int64(i), 0)
		}
		checkTree(t, tr)
		if got := tr.arenaBytes(); got > 2*size+3*maxChunk {
			t.Errorf("one node of %d bytes overwritten %d times: %d bytes of arena", size, n, got)
		}
		if r := decode(tr.record(mustLookup(t, tr, "/a/b"))); r.data[0] != byte((n-1)%256) || r.stat.ModifyRevision != n-1 {
			t.Errorf("the last write lost: %v %+v", r.data[0], r.stat)
		}
	}
	tr := newTree("/")
	rng := rand.New(rand.NewSource(2))
	sizes := map[string]int{}
	for i := 0; i < 30000; i++ {
		p := fmt.Sprintf("/t/%d", rng.Intn(500))
		n := rng.Intn(2000)
		tr.set(p, make([]byte, n), core.Stat{}, int64(i), 0)
		sizes[p] = n
	}
	checkTree(t, tr)
	live := 0
	for p, n := range sizes {
		live += len(p) + n
	}
	if got := tr.arenaBytes(); got > 3*live+2*maxChunk {
		t.Errorf("%d bytes of paths and data live, %d bytes of arena", live, got)
	}
}

func mustLookup(t *testing.T, tr *tree, p string) uint32 {
	t.Helper()
	id, ok := tr.lookup(p)
	if !ok {
		t.Fatalf("%s not found", p)
	}
	return id
}

// TestSharedDataOutlivesCompaction: data handed out shared stays as it was
// after the node changed and its record's chunk was compacted away.
func TestSharedDataOutlivesCompaction(t *testing.T) {
	ctx := context.Background()
	im := New(Options{})
	tr := newTree("/")
	const n = 2000 // the chunks grow to their largest
	pad := strings.Repeat(" ", 200)
	for i := 0; i < n; i++ {
		put(im, tr, core.Node{Path: fmt.Sprintf("/n/%d", i), Data: []byte(fmt.Sprintf("first %d", i) + pad), Stat: core.Stat{ModifyRevision: 1}})
	}
	im.install(tr, 1)
	const p = "/n/1500"
	res, err := im.GetManyShared(ctx, []string{p}, core.ReadOptions{})
	if err != nil || string(res[0].Node.Data) != "first 1500"+pad {
		t.Fatalf("%+v %v", res, err)
	}
	held := res[0].Node.Data
	snap, err := im.SnapshotShared(ctx, "/n")
	if err != nil {
		t.Fatal(err)
	}
	ci := tr.nodes[mustLookup(t, tr, p)].ref >> 32
	orig := tr.chunks[ci].buf
	if cap(orig) != maxChunk {
		t.Fatalf("%s's chunk holds %d bytes, want %d", p, cap(orig), maxChunk)
	}
	for rev := int64(2); rev < 3*n; rev++ {
		p := fmt.Sprintf("/n/%d", rev%n)
		im.applyEvents([]core.WatchEvent{{Type: core.EventUpdated, Path: p, Data: bytes.Repeat([]byte("x"), 500), Stat: core.Stat{ModifyRevision: rev}, Revision: rev}}, rev)
	}
	if c := tr.chunks[ci].buf; cap(c) > 0 && &c[:1][0] == &orig[:1][0] {
		t.Fatal("the first chunk was not compacted away")
	}
	if string(held) != "first 1500"+pad {
		t.Fatalf("shared data changed under its holder: %q", held)
	}
	for i, n := range snap.Nodes[1:] {
		if want := fmt.Sprintf("first %s", core.BaseName(n.Path)) + pad; string(n.Data) != want {
			t.Fatalf("shared snapshot node %d changed: %q, want %q", i, n.Data, want)
		}
	}
	im.mu.Lock()
	checkTree(t, tr)
	im.mu.Unlock()
}

// TestTreeHashCollision: a path whose hash another path holds in the
// index is kept aside (collide) and is found, changed, listed, compacted
// and deleted like any other.
func TestTreeHashCollision(t *testing.T) {
	tr := newTree("/")
	tr.set("/q", []byte("q"), core.Stat{}, 1, 1)
	q := mustLookup(t, tr, "/q")
	// Make /p's hash taken by /q, as a collision would.
	tr.index[maphash.String(tr.seed, "/p")] = q
	if _, ok := tr.lookup("/p"); ok {
		t.Fatal("/p found before its creation")
	}
	tr.set("/p", []byte("p1"), core.Stat{}, 2, 2)
	tr.set("/p/c", []byte("c"), core.Stat{}, 3, 3)
	if len(tr.collide) != 1 {
		t.Fatalf("collide holds %d paths, want 1", len(tr.collide))
	}
	for i := int64(4); i < 2000; i++ {
		tr.set("/p", bytes.Repeat([]byte("p"), 300), core.Stat{}, i, i) // moves /p's record through compactions
	}
	checkTree(t, tr)
	p := mustLookup(t, tr, "/p")
	if r := tr.get(p); len(r.data) != 300 || r.rev != 1999 || r.stat.NumChildren != 1 {
		t.Fatalf("/p: %+v", r)
	}
	if r, ok := tr.rev("/q"); !ok || r != 1 {
		t.Fatalf("/q: %d %v", r, ok)
	}
	var gone []string
	tr.remove("/p", func(p string) { gone = append(gone, p) })
	sort.Strings(gone)
	if fmt.Sprint(gone) != "[/p /p/c]" || len(tr.collide) != 0 {
		t.Fatalf("deleted %v, collide %v", gone, tr.collide)
	}
	if _, ok := tr.lookup("/p"); ok {
		t.Fatal("/p found after its delete")
	}
	checkTree(t, tr)
}
