package migrate

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
)

// snapshotTree reads every persistent node of src at one revision
// (src.Snapshot of "/") into a Tree (path order), leaving out the root (it always
// exists), the migration marker (catalog.MigrationPath) and ephemeral
// nodes (their owners recreate them; Tree.Ephemerals counts them). The
// source is only read. Errors: the backend's.
func snapshotTree(ctx context.Context, src core.MetadataBackend) (*Tree, error) {
	snap, err := src.Snapshot(ctx, "/")
	if err != nil {
		return nil, fmt.Errorf("snapshot of the source: %w", err)
	}
	nodes := append([]core.Node(nil), snap.Nodes...)
	sort.Slice(nodes, func(i, j int) bool { return pathLess(nodes[i].Path, nodes[j].Path) })
	next := nextSequences(nodes)
	t := &Tree{Header: Header{Source: src.Capabilities().Name, Revision: snap.Revision, Created: time.Now().UTC()}}
	for _, n := range nodes {
		switch {
		case n.Path == "/" || isMarker(n.Path):
		case n.Stat.EphemeralOwner != 0:
			t.Ephemerals++
		default:
			t.Nodes = append(t.Nodes, nodeOf(n, next[n.Path]))
		}
	}
	raiseEpoch(t, sourceEpoch(ctx, src))
	return t, nil
}

// raiseEpoch makes t's /coordinators/epoch hold at least epoch (adding
// the node, and /coordinators, when t lacks them): the coordinator epoch
// of a backend whose epoch is not that node (Raft's is its term) travels
// as the node's value, so the target's leaders continue above it.
func raiseEpoch(t *Tree, epoch int64) {
	if epoch <= 0 {
		return
	}
	data := []byte(strconv.FormatInt(epoch, 10))
	have := map[string]int{}
	for i, n := range t.Nodes {
		have[n.Path] = i
	}
	if i, ok := have[catalog.CoordinatorEpochPath]; ok {
		if v, err := catalog.DecodeEpoch(t.Nodes[i].Data); err != nil || v < epoch {
			t.Nodes[i].Data = data
		}
		return
	}
	if _, ok := have[catalog.CoordinatorsPath]; !ok {
		t.Nodes = append(t.Nodes, Node{Path: catalog.CoordinatorsPath})
	}
	t.Nodes = append(t.Nodes, Node{Path: catalog.CoordinatorEpochPath, Data: data})
	sort.Slice(t.Nodes, func(i, j int) bool { return pathLess(t.Nodes[i].Path, t.Nodes[j].Path) })
}
