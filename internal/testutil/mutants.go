package testutil

import (
	"context"

	"github.com/metaplane/metaplane/core"
)

// MixedRevisionStream is a seeded bug for the conformance suite's own
// tests: a streamed snapshot whose every page is read from a snapshot
// taken anew (the nodes after the last one sent), all labelled with the
// first page's revision, so that a tree changing under the stream comes
// out mixing revisions. The suite's Snapshot/Streamed/ConcurrentWriters
// must catch it, in process and through a plugin.
func MixedRevisionStream(ctx context.Context, b core.MetadataBackend, prefix string, pageBytes int, fn func(rev int64, nodes []core.Node) error) error {
	rev, last, first := int64(-1), "", true
	for {
		snap, err := b.Snapshot(ctx, prefix)
		if err != nil {
			return err
		}
		if rev < 0 {
			rev = snap.Revision
		}
		var page []core.Node
		size := 0
		for _, n := range snap.Nodes {
			if !first && n.Path <= last {
				continue
			}
			if len(page) > 0 && size+len(n.Path)+len(n.Data) > pageBytes {
				break
			}
			page = append(page, n)
			size += len(n.Path) + len(n.Data)
		}
		if len(page) == 0 && !first {
			return nil
		}
		first = false
		if err := fn(rev, page); err != nil {
			return err
		}
		if len(page) == 0 {
			return nil
		}
		last = page[len(page)-1].Path
	}
}
