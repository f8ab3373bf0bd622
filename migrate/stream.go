package migrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
)

// ExportPasses bounds ExportFile's passes over a source that changes
// while it is read.
const ExportPasses = 8

// walkBatch is how many siblings one read of a streaming export asks for;
// walkListers how many children listings run at once.
const (
	walkBatch   = 256
	walkListers = 32
)

// errMoved is returned by a pass whose source changed while it was read.
var errMoved = errors.New("the source changed while it was read")

// ExportResult says what a streaming export wrote.
type ExportResult struct {
	Header     Header
	Nodes      int
	Ephemerals int
	// Passes is how many passes it took (more than 1 when the source
	// changed during a pass).
	Passes int
}

// revisionProbe is a path that never exists: a Snapshot of it is a cheap
// read of the store's current revision (the contract gives an empty
// snapshot with the current revision for a missing prefix).
const revisionProbe = catalog.MigrationPath + "/revision-probe"

// currentRevision is src's current store revision.
func currentRevision(ctx context.Context, src core.MetadataBackend) (int64, error) {
	s, err := src.Snapshot(ctx, revisionProbe)
	if err != nil {
		return 0, fmt.Errorf("read the source's revision: %w", err)
	}
	return s.Revision, nil
}

// ExportFile writes src's persistent nodes to f as a tree file, streaming.
// From a source that declares core.SnapshotStreamer it is one streamed
// snapshot (exportStreamed: the state of one revision however the source
// is written meanwhile, in path order, through a spill file beside f).
// From another it walks the tree: the tool holds one batch of siblings
// per tree level, never the tree (constant memory in the tree size). The
// content is Export's, in another order: parents before children, not
// path order (walkTasks batches of siblings are read at once). A pass reads the source's revision, walks
// the tree top-down (batched reads, children listings concurrent), then
// reads the revision
// again: the same revision proves that nothing changed during the walk,
// so the file is the state at that revision (one consistent read, as
// Export's). When the revision moved, f is truncated and the walk runs
// again, at most ExportPasses times, then it fails with ErrUnavailable
// (the source changes faster than it can be read: export with the
// source's writers stopped, or use live-migrate). progress, when set,
// receives a line every 10 000 nodes. Errors: the backend's, f's.
func ExportFile(ctx context.Context, src core.MetadataBackend, f *os.File, progress io.Writer) (ExportResult, error) {
	return ExportFileWith(ctx, src, f, ExportOptions{Progress: progress})
}

// ExportOptions tune ExportFileWith.
type ExportOptions struct {
	// Progress, when set, receives a line every 10 000 nodes.
	Progress io.Writer
	// ClusterID and Epoch go to the header (a Raft snapshot's).
	ClusterID string
	Epoch     int64
}

// ExportFileWith is ExportFile with the header's cluster id and epoch.
func ExportFileWith(ctx context.Context, src core.MetadataBackend, f *os.File, o ExportOptions) (ExportResult, error) {
	if _, ok := core.Optional[core.SnapshotStreamer](src); ok {
		if err := f.Truncate(0); err != nil {
			return ExportResult{}, err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return ExportResult{}, err
		}
		return exportStreamed(ctx, src, f, filepath.Dir(f.Name()), o)
	}
	progress := o.Progress
	for pass := 1; pass <= ExportPasses; pass++ {
		if err := f.Truncate(0); err != nil {
			return ExportResult{}, err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return ExportResult{}, err
		}
		res, err := exportPass(ctx, src, f, o)
		res.Passes = pass
		if !errors.Is(err, errMoved) {
			return res, err
		}
		if progress != nil {
			fmt.Fprintf(progress, "pass %d: %v; reading again\n", pass, err)
		}
	}
	return ExportResult{Passes: ExportPasses}, fmt.Errorf("%w: export: the source changed during each of %d read passes", core.ErrUnavailable, ExportPasses)
}

func exportPass(ctx context.Context, src core.MetadataBackend, w io.Writer, o ExportOptions) (ExportResult, error) {
	var res ExportResult
	progress := o.Progress
	rev0, err := currentRevision(ctx, src)
	if err != nil {
		return res, err
	}
	res.Header = Header{Source: src.Capabilities().Name, Revision: rev0, Created: time.Now().UTC(), ClusterID: o.ClusterID, Epoch: o.Epoch}
	tw, err := NewWriter(w, res.Header)
	if err != nil {
		return res, err
	}
	wk := &walker{src: src, epoch: sourceEpoch(ctx, src), emit: func(n *Node) error {
		if err := tw.Node(n); err != nil {
			return err
		}
		if progress != nil && tw.Nodes()%10000 == 0 {
			fmt.Fprintf(progress, "exported %d nodes\n", tw.Nodes())
		}
		return nil
	}}
	names, _, err := src.Children(ctx, "/", core.ReadOptions{})
	if err != nil {
		return res, fmt.Errorf("children of /: %w", err)
	}
	if err := wk.run(ctx, "/", wk.virtualChildren("/", names)); err != nil {
		return res, err
	}
	rev1, err := currentRevision(ctx, src)
	if err != nil {
		return res, err
	}
	if rev1 != rev0 {
		return res, fmt.Errorf("%w (revision %d, then %d)", errMoved, rev0, rev1)
	}
	res.Nodes, res.Ephemerals = tw.Nodes(), wk.ephemerals
	return res, tw.Close()
}

// walker reads a tree top-down, batches of siblings at a time.
type walker struct {
	src        core.MetadataBackend
	epoch      int64 // the source's coordinator epoch (raiseEpoch)
	emit       func(*Node) error
	mu         sync.Mutex // guards ephemerals and virtual
	ephemerals int
	virtual    map[string]bool // paths added for the epoch, not on the source
}

// virtualChildren adds to the names of parent's children those the epoch
// needs (/coordinators, /coordinators/epoch), as raiseEpoch does.
func (wk *walker) virtualChildren(parent string, names []string) []string {
	if wk.epoch <= 0 {
		return names
	}
	want := ""
	switch parent {
	case "/":
		want = catalog.CoordinatorsPath
	case catalog.CoordinatorsPath:
		want = catalog.CoordinatorEpochPath
	default:
		return names
	}
	name := want[len(parentPrefix(parent)):]
	for _, n := range names {
		if n == name {
			return names
		}
	}
	if wk.virtual == nil {
		wk.virtual = map[string]bool{}
	}
	wk.virtual[want] = true
	out := append(append([]string(nil), names...), name)
	sort.Strings(out)
	return out
}

func parentPrefix(p string) string {
	if p == "/" {
		return "/"
	}
	return p + "/"
}

// walkTasks is how many batches of siblings a streaming export reads at
// once.
const walkTasks = 16

// task is a batch of siblings to read: parent's children names.
type task struct {
	parent string
	names  []string
}

// run emits every node below root, whose children are names: walkTasks
// workers take batches of siblings from a stack (last in, first out: the
// walk stays deep, so what waits is a few batches per level, not a
// level of the tree), read them (one GetMany, their children listed
// concurrently), emit them, and push their children's batches. A node is
// emitted before any of its children is read: the file is parents first.
func (wk *walker) run(ctx context.Context, root string, names []string) error {
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	var stack []task
	active := 0
	var failed error
	push := func(parent string, names []string) { // mu held
		for len(names) > 0 {
			n := min(len(names), walkBatch)
			stack = append(stack, task{parent, names[:n]})
			names = names[n:]
		}
		cond.Broadcast()
	}
	var emitMu sync.Mutex
	mu.Lock()
	push(root, names)
	mu.Unlock()
	var wg sync.WaitGroup
	for w := 0; w < walkTasks; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				for len(stack) == 0 && active > 0 && failed == nil {
					cond.Wait()
				}
				if failed != nil || len(stack) == 0 {
					mu.Unlock()
					return
				}
				t := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				active++
				mu.Unlock()
				nodes, kids, err := wk.read(ctx, t)
				if err == nil {
					emitMu.Lock()
					for i, n := range nodes {
						if err = wk.emitNode(n, kids[i]); err != nil {
							break
						}
					}
					emitMu.Unlock()
				}
				mu.Lock()
				active--
				if err != nil && failed == nil {
					failed = err
				}
				if err == nil {
					for i, n := range nodes {
						if len(kids[i]) > 0 {
							push(n.Path, kids[i])
						}
					}
				}
				cond.Broadcast()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return failed
}

// read reads one batch of siblings and lists the children of those that
// have any (with the epoch's nodes added where missing).
func (wk *walker) read(ctx context.Context, t task) ([]*core.Node, [][]string, error) {
	paths := make([]string, len(t.names))
	for i, n := range t.names {
		paths[i] = core.JoinPath(t.parent, n)
	}
	rs, err := wk.src.GetMany(ctx, paths, core.ReadOptions{})
	if err != nil {
		return nil, nil, err
	}
	nodes := make([]*core.Node, 0, len(rs))
	eph := 0
	for i := range rs {
		r := &rs[i]
		wk.mu.Lock()
		virtual := wk.virtual[paths[i]]
		wk.mu.Unlock()
		switch {
		case errors.Is(r.Err, core.ErrNotFound) && virtual:
			nodes = append(nodes, &core.Node{Path: paths[i]})
		case errors.Is(r.Err, core.ErrNotFound):
			// Deleted since its parent was listed: the revision check
			// sees it.
		case r.Err != nil:
			return nil, nil, fmt.Errorf("read %s: %w", paths[i], r.Err)
		case isMarker(r.Node.Path):
		case r.Node.Stat.EphemeralOwner != 0:
			eph++
		default:
			nodes = append(nodes, &r.Node)
		}
	}
	kids := make([][]string, len(nodes))
	if err := wk.listChildren(ctx, nodes, kids); err != nil {
		return nil, nil, err
	}
	wk.mu.Lock()
	wk.ephemerals += eph
	for i, n := range nodes {
		kids[i] = wk.virtualChildren(n.Path, kids[i])
	}
	wk.mu.Unlock()
	return nodes, kids, nil
}

// emitNode emits n, whose children are kids, with its next sequential
// suffix and, for /coordinators/epoch, the epoch raised.
func (wk *walker) emitNode(n *core.Node, kids []string) error {
	out := nodeOf(*n, nextSequence(kids))
	if n.Path == catalog.CoordinatorEpochPath && wk.epoch > 0 {
		if v, err := catalog.DecodeEpoch(out.Data); err != nil || v < wk.epoch {
			out.Data = []byte(strconv.FormatInt(wk.epoch, 10))
		}
	}
	return wk.emit(&out)
}

// listChildren lists the children of the nodes that have any, at most
// walkListers at once.
func (wk *walker) listChildren(ctx context.Context, nodes []*core.Node, kids [][]string) error {
	var mu sync.Mutex
	var first error
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < walkListers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				names, _, err := wk.src.Children(ctx, nodes[i].Path, core.ReadOptions{})
				if errors.Is(err, core.ErrNotFound) {
					continue // deleted meanwhile: the revision check sees it
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("children of %s: %w", nodes[i].Path, err)
					}
					mu.Unlock()
					continue
				}
				kids[i] = names
			}
		}()
	}
	for i, n := range nodes {
		if n.Stat.NumChildren > 0 {
			work <- i
		}
	}
	close(work)
	wg.Wait()
	return first
}

// nextSequence is nextSequences for one parent's children names: one
// above the highest 10-digit suffix when every child has one, else 0.
func nextSequence(names []string) int64 {
	var next int64
	for _, n := range names {
		seq, ok := sequenceOf(n)
		if !ok {
			return 0
		}
		next = max(next, seq+1)
	}
	return next
}

// ExportSnapshot writes src's persistent nodes to w as a tree file from
// one streamed snapshot of the whole tree (path order; exportStreamed):
// for a source whose revision moves all the time without its tree
// changing (a serving Raft quorum: every session renewal is an entry).
// Its memory does not grow with the tree on a source that declares
// core.SnapshotStreamer (the nodes pass through a spill file in the
// system's temporary directory); on another, the one Snapshot is held.
// Errors: the backend's, w's.
func ExportSnapshot(ctx context.Context, src core.MetadataBackend, w io.Writer, o ExportOptions) (ExportResult, error) {
	return exportStreamed(ctx, src, w, "", o)
}
