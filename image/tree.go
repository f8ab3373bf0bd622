package image

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"slices"
	"sort"
	"strings"

	"github.com/metaplane/metaplane/core"
)

// tree is the image's node store, built to hold a million nodes in little
// more memory than their paths and data, in few heap objects, none of them
// one per node, and almost all of them free of pointers (the garbage
// collector neither scans them nor counts them as objects to mark):
//
//   - A node's path, stat, revision and data are one record, appended to
//     an arena of large byte chunks (chunk): uvarint len(path), path;
//     the stat's fields as zig-zag varints, each against a neighbour that
//     it usually equals or is close to (modify revision against create
//     revision, modify time against create time, children revision and
//     the image's revision of the node against the modify revision);
//     uvarint len(data)+1 (0: nil data), data. A record is written once
//     and its bytes never change afterwards: a change of the node appends
//     a new record and the old one becomes garbage. That is what makes
//     the data handed out shared (GetManyShared, SnapshotShared) safe: it
//     is a subslice (its capacity cut to its length) of a chunk that is
//     never written there again, and that the garbage collector keeps
//     alive while the slice is held, even after the tree let go of it.
//     No unsafe code and no memory outside the Go heap is involved.
//   - A node has an id, an index into nodes: its record's place (chunk
//     and offset) and its children. Ids of deleted nodes are reused.
//   - The path index maps a 64-bit hash of the path (maphash, a seed per
//     tree) to the id; a lookup checks the record's path. A path whose
//     hash another path already holds (a tree of a million nodes has one
//     such pair with a chance of about 3 in 10^8) goes in collide, keyed
//     by the path itself. The index map holds no pointers and grows a
//     table of at most 1024 slots at a time (the Go map's own growth).
//   - A node's children are their ids, sorted by name, in a block of
//     kids, one []uint32 pool of power-of-two blocks (kept at least a
//     quarter full) with a free list per size. A name is read from the
//     child's record. The pool does not shrink (a resync's new tree
//     starts afresh).
//
// nodes and kids grow by copying (amortised O(1) a node; a few
// milliseconds at a million nodes, once per growth by a quarter). Only
// tree.chunks holds pointers, one a chunk. At 100 000 nodes of a
// Fluss-shaped tree (TestImageBytesPerNode) a node costs about 65 bytes
// above its path and data: 25 of index, 19 of nodes, 13 of record
// header, 7 of kids, 1 of chunk slack.
//
// Garbage in the arena is reclaimed by compaction: when less than half of
// a chunk's bytes are live records (and it is no longer the chunk being
// appended to), its live records are copied to the current chunk and the
// chunk is dropped (the garbage collector frees it once no shared slice
// of it is held). So the arena holds at most about twice the live
// records, and a node overwritten many times costs no more than one. A
// record of largeRecord bytes or more has a chunk of its own, dropped
// with the record. The work of compaction is at most the garbage that
// caused it: a write stays amortised O(size of its record).
//
// A tree is used under the image's lock (or, while a new tree is loaded,
// by its loader alone); it is not safe for concurrent use by itself.
type tree struct {
	prefix string // the image's prefix: it and "/" have no parent
	seed   maphash.Seed

	index   map[uint64]uint32 // maphash of the path -> id
	collide map[string]uint32 // path -> id, for paths whose hash another path holds in index

	nodes    []node
	freeNode uint32 // head of the free ids (+1; 0: none), linked through node.kids
	n        int    // live nodes

	chunks     []chunk
	freeChunks []uint32 // indices of dropped chunks, for reuse
	cur        int      // the chunk appended to; -1: none yet
	pending    []uint32 // chunks to look at for compaction (see tidy)
	dropped    int      // chunks dropped so far

	kids     []uint32
	freeKids [32]uint32 // per block class, the head of its free blocks (+1; 0: none)
}

// node is a node's entry in tree.nodes.
type node struct {
	ref  uint64 // chunk index<<32 | offset of the node's record
	kids uint32 // offset of its children block in tree.kids
	nk   uint32 // number of children (low 27 bits) | block class<<27; 0: no block
}

const (
	nkBits  = 27
	nkMask  = 1<<nkBits - 1
	freeRef = ^uint64(0) // node.ref of a free id

	minChunk    = 4 << 10   // the first chunk of a tree: small trees stay small
	maxChunk    = 128 << 10 // chunks double from minChunk up to this
	largeRecord = 8 << 10   // a record this large gets a chunk of its own
)

// chunk is a piece of the arena. Its bytes below len(buf) are written
// once and never again; a chunk dropped from the tree is never reused
// (the slot in tree.chunks is, with a new buf).
type chunk struct {
	buf    []byte // len: bytes written
	live   int    // bytes of live records
	own    bool   // holds one large record
	queued bool   // in tree.pending
}

func newTree(prefix string) *tree {
	return &tree{prefix: prefix, seed: maphash.MakeSeed(), index: map[uint64]uint32{}, cur: -1}
}

// record is a decoded node record.
type record struct {
	path []byte
	stat core.Stat // NumChildren unset: it is the node's, not the record's
	rev  int64
	data []byte // nil or a subslice of the chunk, capacity cut to length
	size int    // bytes of the record
}

// decode reads the record at the start of b.
func decode(b []byte) record {
	var r record
	n, i := uvarint(b, 0)
	end := i + int(n)
	r.path = b[i:end:end]
	i = end
	var d int64
	s := &r.stat
	s.Version, i = varint(b, i)
	s.CreateRevision, i = varint(b, i)
	d, i = varint(b, i)
	s.ModifyRevision = s.CreateRevision + d
	s.CreateTime, i = varint(b, i)
	d, i = varint(b, i)
	s.ModifyTime = s.CreateTime + d
	s.EphemeralOwner, i = varint(b, i)
	d, i = varint(b, i)
	s.ChildrenRevision = s.ModifyRevision + d
	d, i = varint(b, i)
	r.rev = s.ModifyRevision + d
	n, i = uvarint(b, i)
	if n > 0 {
		end = i + int(n-1)
		r.data = b[i:end:end]
		i = end
		s.DataLength = int32(n - 1)
	}
	r.size = i
	return r
}

// uvarint reads the uvarint at b[i:] and returns it and the index after
// it (most are one byte).
func uvarint(b []byte, i int) (uint64, int) {
	if c := b[i]; c < 0x80 {
		return uint64(c), i + 1
	}
	v, k := binary.Uvarint(b[i:])
	return v, i + k
}

// varint reads the zig-zag varint at b[i:] (see uvarint).
func varint(b []byte, i int) (int64, int) {
	u, i := uvarint(b, i)
	return int64(u>>1) ^ -int64(u&1), i
}

// recordPath returns the path of the record at the start of b.
func recordPath(b []byte) []byte {
	n, i := uvarint(b, 0)
	return b[i : i+int(n)]
}

// baseName is core.BaseName of a path's bytes.
func baseName(p []byte) []byte {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}

// at returns the bytes from the record at ref on.
func (t *tree) at(ref uint64) []byte {
	return t.chunks[ref>>32].buf[uint32(ref):]
}

// record returns id's record bytes (from its start to the end of what its
// chunk holds).
func (t *tree) record(id uint32) []byte {
	return t.at(t.nodes[id].ref)
}

// path returns id's path (bytes of the arena: not to be modified).
func (t *tree) path(id uint32) []byte {
	return recordPath(t.record(id))
}

// name returns id's base name.
func (t *tree) name(id uint32) []byte {
	return baseName(t.path(id))
}

// numChildren returns id's number of children.
func (t *tree) numChildren(id uint32) int {
	return int(t.nodes[id].nk & nkMask)
}

// children returns id's children's ids, in name order. The slice is the
// tree's own, valid until the tree changes.
func (t *tree) children(id uint32) []uint32 {
	nd := &t.nodes[id]
	return t.kids[nd.kids : nd.kids+nd.nk&nkMask]
}

// get returns id's record decoded, its stat complete.
func (t *tree) get(id uint32) record {
	r := decode(t.record(id))
	r.stat.NumChildren = int32(t.numChildren(id))
	return r
}

// lookup returns path's id.
func (t *tree) lookup(path string) (uint32, bool) {
	id, _, ok := t.find(path)
	return id, ok
}

// find returns path's id and record bytes (see record).
func (t *tree) find(path string) (uint32, []byte, bool) {
	if len(t.collide) > 0 {
		if id, ok := t.collide[path]; ok {
			return id, t.record(id), true
		}
	}
	id, ok := t.index[maphash.String(t.seed, path)]
	if !ok {
		return 0, nil, false
	}
	rec := t.record(id)
	if string(recordPath(rec)) != path {
		return 0, nil, false
	}
	return id, rec, true
}

// lookupBytes is lookup of a path's bytes.
func (t *tree) lookupBytes(path []byte) (uint32, bool) {
	if len(t.collide) > 0 {
		if id, ok := t.collide[string(path)]; ok {
			return id, true
		}
	}
	id, ok := t.index[maphash.Bytes(t.seed, path)]
	if !ok || string(t.path(id)) != string(path) {
		return 0, false
	}
	return id, true
}

// rev returns path's revision (the revision of its last change applied).
func (t *tree) rev(path string) (int64, bool) {
	_, rec, ok := t.find(path)
	if !ok {
		return 0, false
	}
	return decode(rec).rev, true
}

// set records path's data, stat (less NumChildren and DataLength) and
// revision, creating the node and its missing parents (empty, at revision
// parentRev) as needed. data is copied.
func (t *tree) set(path string, data []byte, st core.Stat, rev, parentRev int64) {
	id, ok := t.lookup(path)
	if ok {
		old := t.nodes[id].ref
		t.nodes[id].ref = t.write(path, data, st, rev)
		t.kill(old)
	} else {
		t.create(path, data, st, rev, parentRev)
	}
	t.tidy()
}

// ensure returns path's id, creating it and its missing parents as empty
// nodes at revision rev.
func (t *tree) ensure(path string, rev int64) uint32 {
	if id, ok := t.lookup(path); ok {
		return id
	}
	return t.create(path, nil, core.Stat{}, rev, rev)
}

// create adds the node path (which the tree does not hold) under its
// parent, which it ensures.
func (t *tree) create(path string, data []byte, st core.Stat, rev, parentRev int64) uint32 {
	id := t.newID()
	t.nodes[id].ref = t.write(path, data, st, rev)
	t.insertIndex(path, id)
	t.n++
	if path != "/" && path != t.prefix {
		p := t.ensure(core.ParentPath(path), parentRev)
		t.addChild(p, id, core.BaseName(path))
	}
	return id
}

// remove deletes path and its subtree, calling gone with the path of each
// node deleted (a new string).
func (t *tree) remove(path string, gone func(string)) {
	id, ok := t.lookup(path)
	if !ok {
		return
	}
	if path != "/" {
		if p, ok := t.lookup(core.ParentPath(path)); ok {
			t.removeChild(p, id, core.BaseName(path))
		}
	}
	t.removeSubtree(id, gone)
	t.tidy()
}

// removeSubtree deletes id and its descendants (not from id's parent).
func (t *tree) removeSubtree(id uint32, gone func(string)) {
	nd := t.nodes[id]
	if n := nd.nk & nkMask; n > 0 {
		for _, c := range t.kids[nd.kids : nd.kids+n] {
			// Deleting a subtree allocates no kids block: this one stays
			// as it is until freed below.
			t.removeSubtree(c, gone)
		}
		t.freeBlock(nd.kids, nd.nk>>nkBits)
	}
	p := t.path(id)
	path := string(p)
	gone(path)
	t.removeIndex(path, id)
	t.kill(nd.ref)
	t.nodes[id] = node{ref: freeRef, kids: t.freeNode}
	t.freeNode = id + 1
	t.n--
}

func (t *tree) newID() uint32 {
	if t.freeNode != 0 {
		id := t.freeNode - 1
		t.freeNode = t.nodes[id].kids
		t.nodes[id] = node{}
		return id
	}
	if uint64(len(t.nodes)) >= 1<<32-1 {
		panic("image: too many nodes")
	}
	t.nodes = append(t.nodes, node{})
	return uint32(len(t.nodes) - 1)
}

func (t *tree) insertIndex(path string, id uint32) {
	h := maphash.String(t.seed, path)
	if _, taken := t.index[h]; !taken {
		t.index[h] = id
		return
	}
	if t.collide == nil {
		t.collide = map[string]uint32{}
	}
	t.collide[strings.Clone(path)] = id
}

func (t *tree) removeIndex(path string, id uint32) {
	if cid, ok := t.collide[path]; ok && cid == id {
		delete(t.collide, path)
		return
	}
	delete(t.index, maphash.String(t.seed, path))
}

// addChild inserts child (named name) into parent's children, in order.
func (t *tree) addChild(parent, child uint32, name string) {
	nd := &t.nodes[parent]
	n, class := nd.nk&nkMask, nd.nk>>nkBits
	if n == 0 {
		nd.kids = t.allocBlock(0)
		t.kids[nd.kids] = child
		nd.nk = 1
		return
	}
	if n == nkMask {
		panic("image: too many children")
	}
	kids := t.kids[nd.kids : nd.kids+n]
	var i int
	if string(t.name(kids[n-1])) < name {
		i = int(n) // the usual case: a snapshot's nodes come in path order
	} else {
		i = sort.Search(int(n), func(j int) bool { return string(t.name(kids[j])) >= name })
	}
	if n == 1<<class {
		off := t.allocBlock(class + 1) // may move t.kids
		copy(t.kids[off:off+n], t.kids[nd.kids:nd.kids+n])
		t.freeBlock(nd.kids, class)
		nd.kids, class = off, class+1
	}
	kids = t.kids[nd.kids : nd.kids+n+1]
	copy(kids[i+1:], kids[i:n])
	kids[i] = child
	nd.nk = class<<nkBits | (n + 1)
}

// removeChild removes child (named name) from parent's children.
func (t *tree) removeChild(parent, child uint32, name string) {
	nd := &t.nodes[parent]
	n, class := nd.nk&nkMask, nd.nk>>nkBits
	kids := t.kids[nd.kids : nd.kids+n]
	i := sort.Search(int(n), func(j int) bool { return string(t.name(kids[j])) >= name })
	if i == int(n) || kids[i] != child {
		return
	}
	copy(kids[i:], kids[i+1:])
	n--
	switch {
	case n == 0:
		t.freeBlock(nd.kids, class)
		nd.kids, nd.nk = 0, 0
		return
	case class > 1 && n <= 1<<class/4:
		off := t.allocBlock(class - 1)
		copy(t.kids[off:off+n], t.kids[nd.kids:nd.kids+n])
		t.freeBlock(nd.kids, class)
		nd.kids, class = off, class-1
	}
	nd.nk = class<<nkBits | n
}

// allocBlock returns the offset in t.kids of a free block of 1<<class
// entries.
func (t *tree) allocBlock(class uint32) uint32 {
	if f := t.freeKids[class]; f != 0 {
		t.freeKids[class] = t.kids[f-1]
		return f - 1
	}
	off := len(t.kids)
	size := 1 << class
	if uint64(off+size) >= 1<<32 {
		panic("image: too many children")
	}
	t.kids = slices.Grow(t.kids, size)[:off+size]
	return uint32(off)
}

func (t *tree) freeBlock(off, class uint32) {
	t.kids[off] = t.freeKids[class]
	t.freeKids[class] = off + 1
}

// write appends a record to the arena and returns its ref.
func (t *tree) write(path string, data []byte, st core.Stat, rev int64) uint64 {
	var tail [9*binary.MaxVarintLen64 + 1]byte
	b := tail[:0]
	b = binary.AppendVarint(b, st.Version)
	b = binary.AppendVarint(b, st.CreateRevision)
	b = binary.AppendVarint(b, st.ModifyRevision-st.CreateRevision)
	b = binary.AppendVarint(b, st.CreateTime)
	b = binary.AppendVarint(b, st.ModifyTime-st.CreateTime)
	b = binary.AppendVarint(b, st.EphemeralOwner)
	b = binary.AppendVarint(b, st.ChildrenRevision-st.ModifyRevision)
	b = binary.AppendVarint(b, rev-st.ModifyRevision)
	if data == nil {
		b = binary.AppendUvarint(b, 0)
	} else {
		b = binary.AppendUvarint(b, uint64(len(data))+1)
	}
	size := uvarintLen(uint64(len(path))) + len(path) + len(b) + len(data)
	ref, c := t.alloc(size)
	c.buf = binary.AppendUvarint(c.buf, uint64(len(path)))
	c.buf = append(c.buf, path...)
	c.buf = append(c.buf, b...)
	c.buf = append(c.buf, data...)
	return ref
}

func uvarintLen(v uint64) int {
	return (bits.Len64(v|1) + 6) / 7
}

// alloc reserves size bytes of arena: it returns their ref and the chunk
// to append them to (size bytes fit in its capacity), counted live.
func (t *tree) alloc(size int) (uint64, *chunk) {
	if size >= largeRecord {
		ci := t.newChunk(size)
		c := &t.chunks[ci]
		c.own, c.live = true, size
		return uint64(ci) << 32, c
	}
	if t.cur < 0 || cap(t.chunks[t.cur].buf)-len(t.chunks[t.cur].buf) < size {
		next := minChunk
		if t.cur >= 0 {
			next = min(2*cap(t.chunks[t.cur].buf), maxChunk)
			t.queue(uint32(t.cur)) // sealed: it may hold garbage enough to compact
		}
		t.cur = int(t.newChunk(max(next, size)))
	}
	c := &t.chunks[t.cur]
	c.live += size
	return uint64(t.cur)<<32 | uint64(len(c.buf)), c
}

func (t *tree) newChunk(size int) uint32 {
	c := chunk{buf: make([]byte, 0, size)}
	if n := len(t.freeChunks); n > 0 {
		ci := t.freeChunks[n-1]
		t.freeChunks = t.freeChunks[:n-1]
		t.chunks[ci] = c
		return ci
	}
	t.chunks = append(t.chunks, c)
	return uint32(len(t.chunks) - 1)
}

// kill counts the record at ref dead.
func (t *tree) kill(ref uint64) {
	ci := uint32(ref >> 32)
	c := &t.chunks[ci]
	c.live -= decode(c.buf[uint32(ref):]).size
	if c.own {
		if c.live == 0 {
			t.dropChunk(ci)
		}
		return
	}
	if int(ci) != t.cur {
		t.queue(ci)
	}
}

// queue marks chunk ci for a look by tidy when less than half of it is
// live.
func (t *tree) queue(ci uint32) {
	c := &t.chunks[ci]
	if !c.queued && c.live*2 < len(c.buf) {
		c.queued = true
		t.pending = append(t.pending, ci)
	}
}

// tidy compacts the chunks queued, after a change of the tree.
func (t *tree) tidy() {
	for len(t.pending) > 0 {
		ci := t.pending[len(t.pending)-1]
		t.pending = t.pending[:len(t.pending)-1]
		c := &t.chunks[ci]
		c.queued = false
		if int(ci) != t.cur && c.live*2 < len(c.buf) {
			t.compact(ci)
		}
	}
}

// compact copies chunk ci's live records to the current chunk and drops
// ci. A record is live when its path's node refers to it.
func (t *tree) compact(ci uint32) {
	buf := t.chunks[ci].buf
	for off := 0; off < len(buf); {
		size := decode(buf[off:]).size
		ref := uint64(ci)<<32 | uint64(off)
		if id, ok := t.lookupBytes(recordPath(buf[off:])); ok && t.nodes[id].ref == ref {
			nref, c := t.alloc(size)
			c.buf = append(c.buf, buf[off:off+size]...)
			t.nodes[id].ref = nref
		}
		off += size
	}
	t.dropChunk(ci)
}

// dropChunk lets chunk ci go. Its bytes stay as they are (shared data may
// still point into them); the garbage collector frees them.
func (t *tree) dropChunk(ci uint32) {
	t.chunks[ci] = chunk{}
	t.freeChunks = append(t.freeChunks, ci)
	t.dropped++
}

// arenaBytes returns the bytes of the arena's chunks (their capacity).
func (t *tree) arenaBytes() int {
	n := 0
	for _, c := range t.chunks {
		n += cap(c.buf)
	}
	return n
}
