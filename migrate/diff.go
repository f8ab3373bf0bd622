package migrate

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/metaplane/metaplane/core"
)

// diffReaders is how many batches readBatches has in flight, readBatch
// how many paths each asks for.
const (
	diffReaders = 8
	readBatch   = 1024
)

// diff reads the source's current state by difference from c.known (the
// last round's read): the stat of every known node (no data, batches of
// readBatch, diffReaders at once), then the data of the nodes whose
// modify revision or version moved, the children of the nodes whose
// children's revision (or count) moved, and the whole subtree of every
// node new since (created, or recreated: a new create revision). A node
// gone takes what was known below it. A node whose stat did not move is
// not read: its data is the last round's. The read is proportional to
// the tree's size in stats only, and to what changed in data.
//
// It returns the nodes (the root and ephemerals included, the marker
// not), the highest revision among their stats, sound (every stat carried
// its children's revision), and quiet: no node
// changed and every stat carried its children's revision
// (core.Stat.ChildrenRevision), so the source held c.known's state from
// the last round's reads through this one's (a consistent state: every
// node unchanged over an interval that all the intervals share).
func (c *copier) diff(ctx context.Context, src core.MetadataBackend) ([]core.Node, int64, bool, bool, error) {
	known := c.known
	stats, err := readBatches(ctx, src, len(known), func(i int) string { return known[i].Path }, core.ReadOptions{NoData: true})
	if err != nil {
		return nil, 0, false, false, err
	}
	sound := true
	changed := 0
	gone := map[string]bool{}
	cur := make([]core.Node, len(known))
	alive := make([]bool, len(known))
	var needData []int
	for i, k := range known {
		if k.Path != "/" && gone[parentOf(k.Path)] {
			gone[k.Path] = true
			continue
		}
		r := &stats[i]
		switch {
		case errors.Is(r.Err, core.ErrNotFound):
			gone[k.Path] = true
			changed++
			continue
		case r.Err != nil:
			return nil, 0, false, false, fmt.Errorf("read %s: %w", k.Path, r.Err)
		case r.Node.Stat.CreateRevision != k.Stat.CreateRevision:
			// Recreated: its parent's children moved, and the listing
			// finds it new.
			gone[k.Path] = true
			changed++
			continue
		}
		st := r.Node.Stat
		if st.ChildrenRevision == 0 {
			sound = false
		}
		cur[i], alive[i] = core.Node{Path: k.Path, Data: k.Data, Stat: st}, true
		if st.ModifyRevision != k.Stat.ModifyRevision || st.Version != k.Stat.Version {
			needData = append(needData, i)
		}
	}
	if len(needData) > 0 {
		rs, err := readBatches(ctx, src, len(needData), func(j int) string { return known[needData[j]].Path }, core.ReadOptions{})
		if err != nil {
			return nil, 0, false, false, err
		}
		for j, i := range needData {
			r := &rs[j]
			changed++
			switch {
			case errors.Is(r.Err, core.ErrNotFound) || (r.Err == nil && r.Node.Stat.CreateRevision != known[i].Stat.CreateRevision):
				// Gone (or recreated) since its stat: it is left out,
				// with what is below it, and the next round sees the
				// rest.
				alive[i] = false
				gone[known[i].Path] = true
			case r.Err != nil:
				return nil, 0, false, false, fmt.Errorf("read %s: %w", known[i].Path, r.Err)
			default:
				// The data's fields from this read, the children's from
				// the stat read (the listing below, when they moved).
				st := cur[i].Stat
				d := r.Node.Stat
				st.Version, st.ModifyRevision, st.ModifyTime, st.DataLength = d.Version, d.ModifyRevision, d.ModifyTime, d.DataLength
				cur[i].Data, cur[i].Stat = r.Node.Data, st
			}
		}
	}
	// What is left of the known nodes: those alive whose parent is left
	// (path order: a parent before its children).
	left := make(map[string]bool, len(known))
	for i, k := range known {
		if alive[i] && !gone[k.Path] && (k.Path == "/" || left[parentOf(k.Path)]) {
			left[k.Path] = true
		} else {
			alive[i] = false
		}
	}
	// The children of the nodes whose children moved (or whose backend
	// does not say) are listed; a name not left is a new subtree.
	var parents []*core.Node
	var parentIdx []int
	for i, k := range known {
		st := cur[i].Stat
		if alive[i] && (st.NumChildren != k.Stat.NumChildren || st.ChildrenRevision != k.Stat.ChildrenRevision || (st.ChildrenRevision == 0 && st.NumChildren > 0)) {
			parents = append(parents, &cur[i])
			parentIdx = append(parentIdx, i)
		}
	}
	kids := make([][]string, len(parents))
	if err := (&walker{src: src}).listChildren(ctx, parents, kids); err != nil {
		return nil, 0, false, false, err
	}
	var roots []string
	for j, p := range parents {
		if k := known[parentIdx[j]].Stat; k.ChildrenRevision != p.Stat.ChildrenRevision || k.NumChildren != p.Stat.NumChildren {
			changed++
		}
		for _, name := range kids[j] {
			if cp := core.JoinPath(p.Path, name); !left[cp] && !isMarker(cp) {
				roots = append(roots, cp)
			}
		}
	}
	out := make([]core.Node, 0, len(known))
	for i := range known {
		if alive[i] {
			out = append(out, cur[i])
		}
	}
	if len(roots) > 0 {
		fresh, _, err := scan(ctx, src, roots...)
		if err != nil {
			return nil, 0, false, false, err
		}
		changed += len(fresh)
		out = append(out, fresh...)
		sort.Slice(out, func(i, j int) bool { return pathLess(out[i].Path, out[j].Path) })
	}
	var rev int64
	for _, n := range out {
		rev = max(rev, n.Stat.CreateRevision, n.Stat.ModifyRevision, n.Stat.ChildrenRevision)
	}
	return out, rev, sound && changed == 0, sound, nil
}

// readBatches reads n paths (path(i)) with opts in batches of readBatch,
// diffReaders batches at once.
func readBatches(ctx context.Context, src core.MetadataBackend, n int, path func(int) string, opts core.ReadOptions) ([]core.GetResult, error) {
	out := make([]core.GetResult, n)
	work := make(chan int)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for w := 0; w < diffReaders; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lo := range work {
				hi := min(lo+readBatch, n)
				paths := make([]string, hi-lo)
				for i := range paths {
					paths[i] = path(lo + i)
				}
				rs, err := src.GetMany(ctx, paths, opts)
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					continue
				}
				copy(out[lo:hi], rs)
			}
		}()
	}
	for lo := 0; lo < n; lo += readBatch {
		work <- lo
	}
	close(work)
	wg.Wait()
	return out, first
}
