package migrate

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
)

// exportPageBytes is the page size a streamed export asks its source for.
const exportPageBytes = 1 << 20

// exportStreamed writes src's persistent nodes to w as a tree file from
// one streamed snapshot of the whole tree (core.StreamSnapshot: the state
// of one revision, read in pages; a backend without core.SnapshotStreamer
// gives one whole Snapshot, held by that call). The file is in byte order
// of the paths (Header.Sorted). A node's NextSequence depends on its
// children, which the stream gives after the node, so the nodes go to a
// spill file in dir first (JSON lines, the tree once on disk), and are
// copied to w with their NextSequence. Memory: a page, the ancestors of
// the node being read (with what their children were so far), and the
// NextSequence of every sequential family (a parent whose children all
// carry a sequential suffix); never the tree. Errors: the backend's, w's,
// the spill file's.
func exportStreamed(ctx context.Context, src core.MetadataBackend, w io.Writer, dir string, o ExportOptions) (ExportResult, error) {
	var res ExportResult
	spill, err := os.CreateTemp(dir, ".metaplane-export-*")
	if err != nil {
		return res, fmt.Errorf("export spill file: %w", err)
	}
	defer func() {
		spill.Close()
		os.Remove(spill.Name())
	}()
	bw := bufio.NewWriterSize(spill, 1<<20)
	enc := json.NewEncoder(bw)
	epoch := sourceEpoch(ctx, src)
	fam := &families{next: map[string]int64{}}
	var rev int64
	var haveCoordinators, haveEpoch bool
	var epochData []byte
	err = core.StreamSnapshot(ctx, src, "/", exportPageBytes, func(r int64, nodes []core.Node) error {
		rev = r
		for i := range nodes {
			n := &nodes[i]
			fam.add(n.Path)
			switch {
			case n.Path == "/" || isMarker(n.Path):
				continue
			case n.Stat.EphemeralOwner != 0:
				res.Ephemerals++
				continue
			case n.Path == catalog.CoordinatorsPath:
				haveCoordinators = true
			case n.Path == catalog.CoordinatorEpochPath:
				haveEpoch = true
				epochData = append([]byte(nil), n.Data...)
			}
			nd := nodeOf(*n, 0)
			if err := enc.Encode(&nd); err != nil {
				return fmt.Errorf("export spill file: %w", err)
			}
			res.Nodes++
			if o.Progress != nil && res.Nodes%10000 == 0 {
				fmt.Fprintf(o.Progress, "read %d nodes\n", res.Nodes)
			}
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("snapshot of the source: %w", err)
	}
	fam.end()
	if err := bw.Flush(); err != nil {
		return res, fmt.Errorf("export spill file: %w", err)
	}
	// The epoch node, raised or added as raiseEpoch does.
	var virtual []Node
	var epochOverride []byte
	if epoch > 0 {
		data := []byte(strconv.FormatInt(epoch, 10))
		if haveEpoch {
			if v, err := catalog.DecodeEpoch(epochData); err != nil || v < epoch {
				epochOverride = data
			}
		} else {
			if !haveCoordinators {
				virtual = append(virtual, Node{Path: catalog.CoordinatorsPath})
			}
			virtual = append(virtual, Node{Path: catalog.CoordinatorEpochPath, Data: data})
		}
	}
	res.Header = Header{Source: src.Capabilities().Name, Revision: rev, Created: time.Now().UTC(),
		ClusterID: o.ClusterID, Epoch: o.Epoch, Sorted: true}
	tw, err := NewWriter(w, res.Header)
	if err != nil {
		return res, err
	}
	if _, err := spill.Seek(0, io.SeekStart); err != nil {
		return res, fmt.Errorf("export spill file: %w", err)
	}
	dec := json.NewDecoder(bufio.NewReaderSize(spill, 1<<20))
	put := func(n *Node) error {
		for len(virtual) > 0 && virtual[0].Path < n.Path {
			if err := tw.Node(&virtual[0]); err != nil {
				return err
			}
			virtual = virtual[1:]
		}
		return tw.Node(n)
	}
	for i := 0; i < res.Nodes; i++ {
		var n Node
		if err := dec.Decode(&n); err != nil {
			return res, fmt.Errorf("export spill file: %w", err)
		}
		n.NextSequence = fam.next[n.Path]
		if n.Path == catalog.CoordinatorEpochPath && epochOverride != nil {
			n.Data = epochOverride
		}
		if err := put(&n); err != nil {
			return res, err
		}
	}
	for i := range virtual {
		if err := tw.Node(&virtual[i]); err != nil {
			return res, err
		}
	}
	res.Nodes = tw.Nodes()
	res.Passes = 1
	return res, tw.Close()
}

// families finds the sequential families (nextSequences) of a tree read
// in byte order of the paths, holding only the nodes that are prefixes of
// the latest path (its ancestors among them: a node's children all come
// while it is one) and the families found.
type families struct {
	open []family
	next map[string]int64
}

type family struct {
	path       string
	seq, plain bool
	highest    int64
}

func (f *families) add(p string) {
	f.closeUpTo(p)
	if p != "/" && len(f.open) > 0 {
		parent := parentOf(p)
		for i := len(f.open) - 1; i >= 0; i-- {
			if fm := &f.open[i]; fm.path == parent {
				if s, ok := sequenceOf(p); ok {
					fm.seq = true
					fm.highest = max(fm.highest, s)
				} else {
					fm.plain = true
				}
				break
			}
		}
	}
	f.open = append(f.open, family{path: p})
}

// closeUpTo ends the families of the open nodes that are not prefixes of
// p (all their children have been read).
func (f *families) closeUpTo(p string) {
	for len(f.open) > 0 {
		top := f.open[len(f.open)-1]
		if p != "" && isPrefixNode(top.path, p) {
			return
		}
		if top.seq && !top.plain {
			f.next[top.path] = top.highest + 1
		}
		f.open = f.open[:len(f.open)-1]
	}
}

func (f *families) end() { f.closeUpTo("") }

// isPrefixNode reports whether node a's path is a byte prefix of b (an
// ancestor of b, or a node whose name b's extends with a byte below '/').
func isPrefixNode(a, b string) bool {
	return a == "/" || strings.HasPrefix(b, a)
}
