package coordinator

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// bucketStates is the notifier's view of every bucket's LeaderAndIsr,
// kept up to date from the paths the leader's image reports changed
// (image.Options.OnChange), so that a round decodes only the records that
// changed since the last one instead of copying and decoding the whole
// /tabletservers subtree. Changes outside /tabletservers do not wake the
// notifier at all.
//
// onChange runs on the image's goroutines; the rest (refresh, perServer)
// only on the notifier's.
type bucketStates struct {
	mu    sync.Mutex
	dirty map[string]struct{} // paths under /tabletservers changed since the last refresh
	all   bool                // rebuild from the whole subtree (first round, a resync, too many dirty paths)
	wake  chan struct{}       // one pending wake-up
	// servers is signalled with wake when a change touched a tablet
	// server's registration (/tabletservers/ids): a server came or went,
	// and the controller runs its round without the pause it gives other
	// changes.
	servers chan struct{}

	// The notifier's own state.
	// buckets holds each bucket's state by its leader_isr path; a
	// partition's bucket carries its partition's table id when the
	// partition's assignment names one (put resolves it: the assignment
	// is the buckets' parent, read before them), else -1.
	buckets map[string]*bucketState
	// owned indexes buckets' paths by their owner, the table's or the
	// partition's assignment node they are below (ownerOf), each list
	// sorted, so that a changed node below an owner drops what was kept
	// below it without a pass over every bucket. (A sorted list, not a
	// set: a few words a bucket instead of a small map an owner.)
	owned     map[string][]string
	partTable map[int64]int64 // partition id -> table id, from the partition assignments
	// lists holds every replica's buckets (the states in buckets
	// themselves) in (table, partition, bucket) order, kept in step with
	// each bucket's change unless regroup is set, when perServer rebuilds
	// them all (after a rebuild from the subtree).
	lists   map[int32][]*bucketState
	regroup bool
	// offline holds the buckets without a leader (leader -1), by path,
	// kept in step with every change: the controller gives them a leader
	// as soon as a member of their ISR is alive.
	offline map[string]*bucketState
	// rebuilds counts the refreshes that read the whole subtree (tests).
	rebuilds atomic.Int64
	// refreshing is set (under mu) while a refresh runs.
	refreshing bool
}

type bucketState = adminv1.NotifyLeaderAndIsrRequest_BucketState

// bucketStatesMaxDirty is how many changed paths a round takes one by one;
// past it, the round rebuilds from the whole subtree (as cheap then, and
// bounded in memory).
const bucketStatesMaxDirty = 4096

func newBucketStates() *bucketStates {
	return &bucketStates{dirty: map[string]struct{}{}, all: true, wake: make(chan struct{}, 1), servers: make(chan struct{}, 1),
		buckets: map[string]*bucketState{}, owned: map[string][]string{}, partTable: map[int64]int64{}, regroup: true,
		offline: map[string]*bucketState{}}
}

// onChange records the paths an applied batch of the image touched and
// wakes the notifier when one is under /tabletservers (or above it: the
// image was reloaded).
func (s *bucketStates) onChange(paths []string) {
	relevant, registration := false, false
	s.mu.Lock()
	for _, p := range paths {
		switch {
		case core.HasPrefixPath(p, catalog.TabletServersRoot) && p != catalog.TabletServersRoot:
			relevant = true
			registration = registration || core.HasPrefixPath(p, catalog.TabletServerIDsPath)
			if !s.all {
				s.dirty[p] = struct{}{}
				if len(s.dirty) > bucketStatesMaxDirty {
					s.all, s.dirty = true, map[string]struct{}{}
				}
			}
		case core.HasPrefixPath(catalog.TabletServersRoot, p):
			relevant = true
			s.all, s.dirty = true, map[string]struct{}{}
		}
	}
	s.mu.Unlock()
	if registration {
		select {
		case s.servers <- struct{}{}:
		default:
		}
	}
	if relevant {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// current reports whether every change recorded has been refreshed (no
// change pending, no refresh running).
func (s *bucketStates) current() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.all && len(s.dirty) == 0 && !s.refreshing
}

// sharedSnapshotter is a reader whose snapshot can share its data
// (image.Image): the states only decode it.
type sharedSnapshotter interface {
	SnapshotShared(ctx context.Context, prefix string) (core.Snapshot, error)
}

// snapshotShared is img's snapshot of prefix, its data shared where img
// allows it (the first round reads the whole /tabletservers subtree).
func snapshotShared(ctx context.Context, img core.Reader, prefix string) (core.Snapshot, error) {
	if s, ok := img.(sharedSnapshotter); ok {
		return s.SnapshotShared(ctx, prefix)
	}
	return img.Snapshot(ctx, prefix)
}

// refresh brings the states up to date with img: the changed paths, or
// everything when a rebuild is due. On a read failure the changes stay
// pending for the next round.
func (s *bucketStates) refresh(ctx context.Context, cat *catalog.Catalog, img core.Reader) error {
	s.mu.Lock()
	all, dirty := s.all, s.dirty
	s.all, s.dirty = false, map[string]struct{}{}
	s.refreshing = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.refreshing = false
		s.mu.Unlock()
	}()
	if !all {
		// A path below another changed path needs no pass of its own:
		// the other's pass reads its whole subtree again. A createTable
		// changes its assignment node and four nodes below it that each
		// hold buckets; counted apart, thirteen createTables in one
		// round made the round rebuild from the whole subtree.
		for p := range dirty {
			for q := core.ParentPath(p); q != "/"; q = core.ParentPath(q) {
				if _, ok := dirty[q]; ok {
					delete(dirty, p)
					break
				}
			}
		}
		// A path that holds buckets below it (a table's assignment node
		// deleted with its buckets, a partition's assignment) drops what
		// was kept below it: one pass over the kept states each, so only
		// a few go one by one.
		passes := 0
		for p := range dirty {
			if k, _ := classifyPath(p); k == pathPartition || k == pathInner {
				passes++
			}
		}
		all = passes > 64
	}
	if all {
		s.rebuilds.Add(1)
		snap, err := snapshotShared(ctx, img, catalog.TabletServersRoot)
		if err != nil {
			s.mu.Lock()
			s.all = true
			s.mu.Unlock()
			return err
		}
		clear(s.buckets)
		clear(s.owned)
		clear(s.offline)
		clear(s.partTable)
		s.regroup = true
		for _, n := range snap.Nodes {
			s.put(cat, n)
		}
		return nil
	}
	for p := range dirty {
		snap, err := snapshotShared(ctx, img, p)
		if err != nil {
			s.mu.Lock()
			for q := range dirty {
				s.dirty[q] = struct{}{}
			}
			s.mu.Unlock()
			return err
		}
		s.drop(p)
		for _, n := range snap.Nodes {
			s.put(cat, n)
		}
	}
	return nil
}

// pathKind is what a path under /tabletservers is to the states.
type pathKind int

const (
	pathBucket    pathKind = iota // a bucket's leader_isr: one state
	pathPartition                 // a partition's assignment: its table id, its buckets below
	pathNoBuckets                 // below /tabletservers/ids or server_tags: nothing kept
	pathInner                     // anything else: the states kept below it
)

// classifyPath is p's kind, with the partition id of a pathPartition.
func classifyPath(p string) (pathKind, int64) {
	if _, _, _, ok := parseLeaderIsrPath(p); ok {
		return pathBucket, 0
	}
	if rest, ok := strings.CutPrefix(p, catalog.PartitionAssignsPath+"/"); ok && !strings.Contains(rest, "/") {
		if id, err := strconv.ParseInt(rest, 10, 64); err == nil {
			return pathPartition, id
		}
	}
	if core.HasPrefixPath(p, catalog.TabletServerIDsPath) || core.HasPrefixPath(p, catalog.ServerTagsPath) {
		return pathNoBuckets, 0
	}
	return pathInner, 0
}

// drop forgets every record at or below p.
func (s *bucketStates) drop(p string) {
	switch k, id := classifyPath(p); k {
	case pathBucket:
		s.setBucket(p, nil)
		return
	case pathNoBuckets:
		return
	case pathPartition:
		s.setPartition(id, 0, false)
	}
	forget := func(q string) {
		if core.HasPrefixPath(q, p) {
			s.setBucket(q, nil)
		}
	}
	if o, ok := ownerOf(p); ok {
		// forget changes the list: walk a copy.
		for _, q := range slices.Clone(s.owned[o]) {
			forget(q)
		}
	} else {
		for q := range s.buckets {
			forget(q)
		}
	}
	if core.HasPrefixPath(catalog.PartitionAssignsPath, p) {
		clear(s.partTable)
	}
}

// ownerOf is the table's or the partition's assignment node at or above
// p (/tabletservers/tables/<t> or /tabletservers/partitions/<p>), which
// every bucket's leader_isr path is below; false for a path above them or
// elsewhere.
func ownerOf(p string) (string, bool) {
	for _, root := range [...]string{catalog.TableAssignmentsPath, catalog.PartitionAssignsPath} {
		rest, ok := strings.CutPrefix(p, root+"/")
		if !ok || rest == "" {
			continue
		}
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			return p[:len(root)+1+i], true
		}
		return p, true
	}
	return "", false
}

// setPartition records (ok) or forgets partition id's table. Its
// buckets, kept with the table id they had, need no pass here: they are
// below its path, so the refresh that takes this change puts them again,
// with the new table id (refresh reads each changed path's whole subtree,
// parent first).
func (s *bucketStates) setPartition(id, table int64, ok bool) {
	if ok {
		s.partTable[id] = table
	} else {
		delete(s.partTable, id)
	}
}

// setBucket records (b nil: forgets) the bucket at path p and keeps lists
// in step.
func (s *bucketStates) setBucket(p string, b *bucketState) {
	o, _ := ownerOf(p)
	if b != nil && b.Leader < 0 {
		s.offline[p] = b
	} else {
		delete(s.offline, p)
	}
	old, had := s.buckets[p]
	if b == nil {
		delete(s.buckets, p)
		if l := s.owned[o]; l != nil {
			if i, found := slices.BinarySearch(l, p); found {
				l = slices.Delete(l, i, i+1)
			}
			if len(l) == 0 {
				delete(s.owned, o)
			} else {
				s.owned[o] = l
			}
		}
	} else {
		s.buckets[p] = b
		if l := s.owned[o]; !had {
			i, _ := slices.BinarySearch(l, p)
			s.owned[o] = slices.Insert(l, i, p)
		}
	}
	if s.regroup {
		return
	}
	if had {
		for _, r := range old.Isr {
			s.unlist(r, old)
		}
	}
	if b != nil {
		for _, r := range b.Isr {
			l := s.lists[r]
			i, _ := slices.BinarySearchFunc(l, b, cmpBucket)
			s.lists[r] = slices.Insert(l, i, b)
		}
	}
}

// unlist removes entry e from replica r's list. Each path has its own
// key (a table's bucket, or a partition's), so the key finds it; a replica
// named twice in an ISR was listed twice, and is unlisted twice.
func (s *bucketStates) unlist(r int32, e *bucketState) {
	l := s.lists[r]
	if i, found := slices.BinarySearchFunc(l, e, cmpBucket); found {
		l = slices.Delete(l, i, i+1)
	}
	if len(l) == 0 {
		delete(s.lists, r)
	} else {
		s.lists[r] = l
	}
}

// cmpBucket orders buckets by table, partition and bucket.
func cmpBucket(a, b *bucketState) int {
	if c := cmp.Compare(a.TableId, b.TableId); c != 0 {
		return c
	}
	if c := cmp.Compare(a.PartitionId, b.PartitionId); c != 0 {
		return c
	}
	return cmp.Compare(a.Bucket, b.Bucket)
}

// put records n when it is a bucket's leader_isr or a partition's
// assignment; an undecodable record is left out, as before.
func (s *bucketStates) put(cat *catalog.Catalog, n core.Node) {
	tableID, partitionID, bucket, ok := parseLeaderIsrPath(n.Path)
	if !ok {
		if k, id := classifyPath(n.Path); k == pathPartition {
			a, err := catalog.Decode(cat, n, catalog.UnmarshalPartitionAssignment)
			s.setPartition(id, a.TableID, err == nil)
		}
		return
	}
	lai, err := catalog.Decode(cat, n, catalog.UnmarshalLeaderAndIsr)
	if err != nil {
		s.setBucket(n.Path, nil)
		return
	}
	if partitionID >= 0 {
		if t, ok := s.partTable[partitionID]; ok {
			tableID = t
		}
	}
	s.setBucket(n.Path, &bucketState{TableId: tableID, PartitionId: partitionID, Bucket: bucket,
		Leader: lai.Leader, LeaderEpoch: lai.LeaderEpoch, Isr: lai.ISR, BucketEpoch: lai.BucketEpoch})
}

// perServer is every replica's buckets, each list in (table, partition,
// bucket) order, so that an unchanged set makes the same request. The
// lists are the states' own: read them before the next refresh, and do not
// change them.
func (s *bucketStates) perServer() map[int32][]*bucketState {
	if !s.regroup {
		return s.lists
	}
	s.lists = map[int32][]*bucketState{}
	for _, b := range s.buckets {
		for _, r := range b.Isr {
			s.lists[r] = append(s.lists[r], b)
		}
	}
	for _, l := range s.lists {
		slices.SortStableFunc(l, cmpBucket)
	}
	s.regroup = false
	return s.lists
}
