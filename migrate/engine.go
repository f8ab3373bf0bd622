package migrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
)

// Options tune an import.
type Options struct {
	// Progress, when set, receives a line per batch (long imports show
	// how far they are).
	Progress io.Writer
	// Resume imports into a target that already holds part of the tree
	// (an import that stopped half way): nodes present with the same data
	// are skipped; any other node present is a conflict, and nothing more
	// is written.
	Resume bool
	// BatchBytes bounds the data of one batch; default 2 MiB.
	BatchBytes int
}

func nodeOf(n core.Node, nextSeq int64) Node {
	return Node{Path: n.Path, Data: n.Data, Version: n.Stat.Version,
		CreateTime: n.Stat.CreateTime, ModifyTime: n.Stat.ModifyTime, NextSequence: nextSeq}
}

// isMarker reports whether p is the migration marker or the leader
// coordinators' markers (catalog.LeadersPath), or below them: a store's
// own state, never copied, compared or counted.
func isMarker(p string) bool {
	for _, root := range storeLocal {
		if p == root || strings.HasPrefix(p, root+"/") {
			return true
		}
	}
	return false
}

// storeLocal are the roots of a store's own state (see isMarker).
var storeLocal = []string{catalog.MigrationPath, catalog.LeadersPath}

// pathLess orders paths so that every parent comes before its children:
// segment by segment.
func pathLess(a, b string) bool {
	for a != "" && b != "" {
		sa, ra := cut(a)
		sb, rb := cut(b)
		if sa != sb {
			return sa < sb
		}
		a, b = ra, rb
	}
	return a == "" && b != ""
}

func cut(p string) (seg, rest string) {
	p = p[1:] // drop the leading "/"
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			return p[:i], p[i:]
		}
	}
	return p, ""
}

// nextSequences returns, for each parent whose children all carry a
// 10-digit sequential suffix (a sequential family; ephemeral members
// count), one above the highest suffix. A parent with any other child
// (say request records named by ids that may end in ten digits) has no
// entry: its next sequential suffix is then the target's own count.
func nextSequences(nodes []core.Node) map[string]int64 {
	next := map[string]int64{}
	plain := map[string]bool{}
	for _, n := range nodes {
		if n.Path == "/" {
			continue
		}
		parent := parentOf(n.Path)
		seq, ok := sequenceOf(n.Path)
		if !ok {
			plain[parent] = true
		} else if seq+1 > next[parent] {
			next[parent] = seq + 1
		}
	}
	for p := range plain {
		delete(next, p)
	}
	return next
}

// sequenceOf returns the 10-digit sequential suffix of a path's last
// segment, when it has one.
func sequenceOf(p string) (int64, bool) {
	if len(p) < 10 {
		return 0, false
	}
	s := p[len(p)-10:]
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// ImportResult says what an import did.
type ImportResult struct {
	// Nodes is how many nodes were written; Skipped how many a resumed
	// import found present already.
	Nodes   int `json:"nodes"`
	Skipped int `json:"skipped"`
	Batches int `json:"batches"`
	// Bulk says the target's Importer was used; KeptVersions that it
	// keeps versions and times (otherwise every node starts at version 0
	// and the import's time).
	Bulk         bool `json:"bulk"`
	KeptVersions bool `json:"kept_versions"`
}

// ErrNotEmpty is returned by Import for a target that already holds nodes
// (other than the root) when Options.Resume is not set.
var ErrNotEmpty = errors.New("migrate: target not empty")

// nodeStream gives a tree's nodes in order, one at a time, to fn (from
// the start at each call): a tree file read again, or a Tree.
type nodeStream func(fn func(*Node) error) error

func (t *Tree) stream(fn func(*Node) error) error {
	for i := range t.Nodes {
		if err := fn(&t.Nodes[i]); err != nil {
			return err
		}
	}
	return nil
}

// fileStream checks the whole file f from its start (Scan without a
// callback: nothing is done with a bad file) and returns its info and a stream of its nodes
// (each call reads f again from the start).
func fileStream(f io.ReadSeeker) (FileInfo, nodeStream, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return FileInfo{}, nil, err
	}
	info, err := Scan(f, nil)
	if err != nil {
		return info, nil, err
	}
	return info, func(fn func(*Node) error) error {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		_, err := Scan(f, fn)
		return err
	}, nil
}

// chunks gives fn the stream's nodes n at a time (the last chunk
// shorter); fn must not keep the slice.
func (s nodeStream) chunks(n int, fn func([]Node) error) error {
	chunk := make([]Node, 0, n)
	err := s(func(nd *Node) error {
		chunk = append(chunk, *nd)
		if len(chunk) < n {
			return nil
		}
		err := fn(chunk)
		chunk = chunk[:0]
		return err
	})
	if err == nil && len(chunk) > 0 {
		err = fn(chunk)
	}
	return err
}

// Import is ImportFile for a tree in memory.
func Import(ctx context.Context, dst core.MetadataBackend, t *Tree, o Options) (ImportResult, error) {
	return importNodes(ctx, dst, FileInfo{Header: t.Header, Nodes: len(t.Nodes)}, t.stream, o)
}

// ImportFile checks the whole tree file f (format, order, count,
// checksum: a bad file is refused and nothing written), then writes its
// nodes into dst as it reads them again (constant memory: a batch at a
// time), dst being empty but for its root (or, with Options.Resume,
// holding a prefix of the file). It uses dst's core.Importer when dst
// declares one (batches of up to core.MaxImportBatch nodes and
// Options.BatchBytes of data, each atomic), and otherwise transactions of
// plain creates (versions then restart at 0: ImportResult.KeptVersions is
// false). Batches are applied in the file's order, so an import that stops
// half way leaves a prefix of the tree, and Options.Resume completes it.
// While it runs the target carries the migration fence
// (catalog.MigrationFencePath), so no coordinator leads a partial tree and
// a leader running on the target resigns, to be elected again afterwards
// with an epoch above the imported /coordinators/epoch; an import that
// stops leaves the fence until a resumed import completes (or
// `metaplane migrate unfence`).
// Errors: ErrBadFile, ErrNotEmpty, a conflict on resume (the first
// differing node named; nothing written), or the backend's (with the
// failing node named).
func ImportFile(ctx context.Context, dst core.MetadataBackend, f io.ReadSeeker, o Options) (ImportResult, error) {
	info, each, err := fileStream(f)
	if err != nil {
		return ImportResult{}, err
	}
	return importNodes(ctx, dst, info, each, o)
}

func importNodes(ctx context.Context, dst core.MetadataBackend, info FileInfo, each nodeStream, o Options) (ImportResult, error) {
	if o.BatchBytes <= 0 {
		o.BatchBytes = 2 << 20
	}
	caps := dst.Capabilities()
	im, bulk := core.Optional[core.Importer](dst)
	res := ImportResult{Bulk: bulk, KeptVersions: bulk && caps.ImportKeepsVersions}
	names, _, err := dst.Children(ctx, "/", core.ReadOptions{})
	if err != nil {
		return res, fmt.Errorf("read the target: %w", err)
	}
	occupied := ""
	for _, n := range names {
		if p := core.JoinPath("/", n); !isMarker(p) {
			occupied = p
			break
		}
	}
	if occupied != "" && !o.Resume {
		return res, fmt.Errorf("%w: it holds %s (and maybe more); import into an empty store, or pass --resume to complete an import that stopped", ErrNotEmpty, occupied)
	}
	// On resume, the nodes present on the target must be the file's:
	// checked for the whole file before anything is written.
	present := func(batch []Node) ([]bool, error) {
		out := make([]bool, len(batch))
		if occupied == "" {
			return out, nil
		}
		rs, err := readBatches(ctx, dst, len(batch), func(i int) string { return batch[i].Path }, core.ReadOptions{})
		if err != nil {
			return nil, fmt.Errorf("read the target: %w", err)
		}
		for i, r := range rs {
			switch {
			case errors.Is(r.Err, core.ErrNotFound):
			case r.Err != nil:
				return nil, fmt.Errorf("read the target's %s: %w", batch[i].Path, r.Err)
			case string(r.Node.Data) != string(batch[i].Data) || r.Node.Stat.EphemeralOwner != 0:
				return nil, fmt.Errorf("resume: %s is on the target with other data (or ephemeral): not the import that stopped; nothing written", batch[i].Path)
			default:
				out[i] = true
			}
		}
		return out, nil
	}
	const chunk = 8192
	if occupied != "" {
		if err := each.chunks(chunk, func(batch []Node) error { _, err := present(batch); return err }); err != nil {
			return res, err
		}
	}
	// The target is fenced while the import runs (and after an import
	// that stopped, until it is resumed to the end): coordinators on it
	// do not lead a partial tree, and its leader, when one runs, resigns
	// and is elected again afterwards, taking an epoch above the
	// imported one.
	if err := fenceTarget(ctx, dst, info.Header.Source); err != nil {
		return res, err
	}
	var batch []Node
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		var err error
		if bulk {
			err = importBatch(ctx, im, batch)
		} else {
			err = createBatch(ctx, dst, batch)
		}
		if err != nil {
			return err
		}
		res.Nodes += len(batch)
		res.Batches++
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "imported %d of %d nodes\n", res.Nodes+res.Skipped, info.Nodes)
		}
		batch, size = batch[:0], 0
		return nil
	}
	// Plain creates do not carry the source's sequential counters: the
	// parents whose next suffix the file gives are kept (a few).
	next := map[string]int64{}
	err = each.chunks(chunk, func(nodes []Node) error {
		skip, err := present(nodes)
		if err != nil {
			return err
		}
		for i := range nodes {
			n := nodes[i]
			if skip[i] {
				res.Skipped++
				continue
			}
			if !bulk && n.NextSequence > 0 {
				next[n.Path] = n.NextSequence
			}
			if len(batch) == core.MaxImportBatch || (len(batch) > 0 && size+len(n.Data) > o.BatchBytes) {
				if err := flush(); err != nil {
					return err
				}
			}
			batch = append(batch, n)
			size += len(n.Data)
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return res, err
	}
	if !bulk {
		if err := continueSequences(ctx, dst, next); err != nil {
			return res, err
		}
	}
	if err := dropMarker(ctx, dst); err != nil {
		return res, fmt.Errorf("the import is complete, but the target's migration fence could not be removed (metaplane migrate unfence removes it): %w", err)
	}
	return res, nil
}

// fenceTarget creates dst's migration marker and fence, those missing.
func fenceTarget(ctx context.Context, dst core.MetadataBackend, source string) error {
	m := markerData(Marker{ID: "import", Role: "target", Phase: "importing", Peer: source, Started: time.Now().UTC()})
	rs, err := dst.GetMany(ctx, []string{catalog.MigrationPath, catalog.MigrationFencePath}, core.ReadOptions{})
	if err != nil {
		return fmt.Errorf("read the target's migration marker: %w", err)
	}
	var ops []core.Op
	for i, p := range []string{catalog.MigrationPath, catalog.MigrationFencePath} {
		if errors.Is(rs[i].Err, core.ErrNotFound) {
			ops = append(ops, core.CreateOp(p, m, core.Persistent))
		}
	}
	if len(ops) == 0 {
		return nil
	}
	if _, err := dst.Txn(ctx, ops, core.TxnOptions{}); err != nil {
		return fmt.Errorf("fence the target for the import: %w", err)
	}
	return nil
}

func importBatch(ctx context.Context, im core.Importer, batch []Node) error {
	nodes := make([]core.ImportNode, len(batch))
	for i := range batch {
		nodes[i] = batch[i].ImportNode()
	}
	if err := im.Import(ctx, nodes, core.Fence{}); err != nil {
		return nodeError(err, batch)
	}
	return nil
}

func createBatch(ctx context.Context, dst core.MetadataBackend, batch []Node) error {
	ops := make([]core.Op, len(batch))
	for i, n := range batch {
		ops[i] = core.CreateOp(n.Path, n.Data, core.Persistent)
	}
	if _, err := dst.Txn(ctx, ops, core.TxnOptions{}); err != nil {
		return nodeError(err, batch)
	}
	return nil
}

// nodeError names the batch's failing node when the error says which.
func nodeError(err error, batch []Node) error {
	if i := core.FailedOpIndex(err); i >= 0 && i < len(batch) {
		return fmt.Errorf("import %s: %w", batch[i].Path, err)
	}
	return fmt.Errorf("import of a batch of %d nodes from %s: %w", len(batch), batch[0].Path, err)
}

// Difference is one way the target differs from the tree.
type Difference struct {
	Path string `json:"path"`
	// What is "missing" (in the tree, not on the target), "extra" (on the
	// target, not in the tree), "data" or "version".
	What   string `json:"what"`
	Detail string `json:"detail,omitempty"`
}

// ValidateResult is what Validate found.
type ValidateResult struct {
	Nodes          int          `json:"nodes"`
	CheckedVersion bool         `json:"checked_versions"`
	Differences    []Difference `json:"differences"`
	// More counts the differences beyond the first 100 listed.
	More int `json:"more,omitempty"`
}

// Validate is ValidateFile for a tree in memory.
func Validate(ctx context.Context, dst core.MetadataBackend, t *Tree, checkVersions bool) (ValidateResult, error) {
	return validateNodes(ctx, dst, t.stream, checkVersions)
}

// ValidateFile checks the whole tree file f (Scan), then compares dst's
// persistent nodes with it: every node present with the same data bytes,
// and, when checkVersions, the same version; no persistent node on dst
// that the file lacks (ephemerals are ignored: their owners recreate
// them). It streams: the file is read in chunks, each compared with one
// batched read of dst, and the number of dst's nodes is checked through
// its stats (each node's children count): only when dst holds nodes the
// file lacks (or ephemerals) are the file's paths held (16 bytes each) to
// name them. Errors: ErrBadFile, the backend's; differences are the
// result, not an error.
func ValidateFile(ctx context.Context, dst core.MetadataBackend, f io.ReadSeeker, checkVersions bool) (ValidateResult, error) {
	_, each, err := fileStream(f)
	if err != nil {
		return ValidateResult{}, err
	}
	return validateNodes(ctx, dst, each, checkVersions)
}

func validateNodes(ctx context.Context, dst core.MetadataBackend, each nodeStream, checkVersions bool) (ValidateResult, error) {
	res := ValidateResult{CheckedVersion: checkVersions, Differences: []Difference{}}
	add := func(d Difference) {
		if len(res.Differences) < 100 {
			res.Differences = append(res.Differences, d)
		} else {
			res.More++
		}
	}
	rs, err := dst.GetMany(ctx, append([]string{"/"}, storeLocal...), core.ReadOptions{NoData: true})
	if err != nil {
		return res, fmt.Errorf("read the target: %w", err)
	}
	// children counts every node below a present node (or the root) that
	// is not a present node of the file: what the target holds that the
	// file lacks, ephemerals and the markers.
	children := int64(rs[0].Node.Stat.NumChildren)
	for _, r := range rs[1:] {
		if r.Err == nil {
			children--
		}
	}
	err = each.chunks(validateChunk, func(nodes []Node) error {
		rs, err := readBatches(ctx, dst, len(nodes), func(i int) string { return nodes[i].Path }, core.ReadOptions{})
		if err != nil {
			return fmt.Errorf("read the target: %w", err)
		}
		for i := range nodes {
			n, r := &nodes[i], &rs[i]
			res.Nodes++
			switch {
			case errors.Is(r.Err, core.ErrNotFound):
				add(Difference{Path: n.Path, What: "missing"})
				continue
			case r.Err != nil:
				return fmt.Errorf("read the target's %s: %w", n.Path, r.Err)
			case r.Node.Stat.EphemeralOwner != 0:
				// Not a persistent node: the owner's, not the tree's.
				add(Difference{Path: n.Path, What: "missing", Detail: "an ephemeral node on the target"})
				children--
				continue
			case string(r.Node.Data) != string(n.Data):
				add(Difference{Path: n.Path, What: "data", Detail: fmt.Sprintf("%d bytes on the target, %d in the tree", len(r.Node.Data), len(n.Data))})
			case checkVersions && r.Node.Stat.Version != n.Version:
				add(Difference{Path: n.Path, What: "version", Detail: fmt.Sprintf("version %d on the target, %d in the tree", r.Node.Stat.Version, n.Version)})
			}
			children += int64(r.Node.Stat.NumChildren) - 1
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	if children > 0 {
		extra, err := extras(ctx, dst, each)
		if err != nil {
			return res, err
		}
		for _, p := range extra {
			add(Difference{Path: p, What: "extra"})
		}
	}
	return res, nil
}

// validateChunk is how many nodes of a tree validateNodes compares at once.
const validateChunk = 8192

// extras names the persistent nodes of dst that the tree lacks (path
// order): the tree's paths are held as a pathSet; the children of every
// tree node dst has children under are listed, and every child the tree
// lacks that is not ephemeral is an extra, with what is below it.
func extras(ctx context.Context, dst core.MetadataBackend, each nodeStream) ([]string, error) {
	in := pathSet{}
	in.add("/")
	parents := []string{"/"}
	var out []string
	visit := func(parents []string) error {
		rs, err := readBatches(ctx, dst, len(parents), func(i int) string { return parents[i] }, core.ReadOptions{NoData: true})
		if err != nil {
			return err
		}
		var ps []*core.Node
		for i := range rs {
			if rs[i].Err == nil && rs[i].Node.Stat.NumChildren > 0 {
				ps = append(ps, &rs[i].Node)
			}
		}
		kids := make([][]string, len(ps))
		if err := (&walker{src: dst}).listChildren(ctx, ps, kids); err != nil {
			return err
		}
		var roots []string
		for i, p := range ps {
			for _, name := range kids[i] {
				if cp := core.JoinPath(p.Path, name); !in.has(cp) && !isMarker(cp) {
					roots = append(roots, cp)
				}
			}
		}
		if len(roots) == 0 {
			return nil
		}
		nodes, _, err := scan(ctx, dst, roots...)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if n.Stat.EphemeralOwner == 0 {
				out = append(out, n.Path)
			}
		}
		return nil
	}
	err := each(func(n *Node) error {
		in.add(n.Path)
		return nil
	})
	if err == nil {
		err = each.chunks(validateChunk, func(nodes []Node) error {
			for i := range nodes {
				parents = append(parents, nodes[i].Path)
			}
			err := visit(parents)
			parents = parents[:0]
			return err
		})
	}
	if err == nil && len(parents) > 0 {
		err = visit(parents)
	}
	if err != nil {
		return nil, fmt.Errorf("list the target's nodes the tree lacks: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return pathLess(out[i], out[j]) })
	return out, nil
}
