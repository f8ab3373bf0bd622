package conformance

import (
	"errors"
	"strconv"
	"strings"

	"github.com/metaplane/metaplane/core"
)

func importProperties() []Property {
	return []Property{
		{
			Name:        "Import/Bulk/ReadBack",
			Needs:       NeedsImport,
			Description: "Import creates its nodes as persistent nodes readable with their data, parents before children in one call; where the backend declares ImportKeepsVersions every node has the given version and times, and a sequential child created afterwards never gets a suffix below the imported NextSequence",
			run: func(e *env) {
				im, _ := core.Optional[core.Importer](e.c0)
				root := p("imported")
				nodes := []core.ImportNode{
					{Path: root, NextSequence: 50},
					{Path: root + "/a", Data: []byte("alpha"), Version: 4, CreateTime: 1_000_000, ModifyTime: 2_000_000},
					{Path: root + "/a/b", Data: []byte("beta")},
				}
				e.ok(im.Import(e.ctx, nodes, core.Fence{}), "import")
				a := e.get(e.client(), root+"/a")
				if string(a.Data) != "alpha" || a.Stat.EphemeralOwner != 0 || a.Stat.NumChildren != 1 {
					e.t.Fatalf("imported %s: %q %+v, want persistent, data alpha, one child", root+"/a", a.Data, a.Stat)
				}
				if string(e.get(e.c0, root+"/a/b").Data) != "beta" {
					e.t.Fatalf("the child was not imported")
				}
				if e.caps.ImportKeepsVersions {
					if a.Stat.Version != 4 || a.Stat.CreateTime != 1_000_000 || a.Stat.ModifyTime != 2_000_000 {
						e.t.Fatalf("declares ImportKeepsVersions, got version %d times %d/%d, want 4 and 1000000/2000000", a.Stat.Version, a.Stat.CreateTime, a.Stat.ModifyTime)
					}
					seq, _, err := core.Create(e.ctx, e.c0, root+"/s-", nil, core.CreateOptions{Mode: core.PersistentSequential})
					e.ok(err, "sequential create after the import")
					if seq < root+"/s-"+core.SequentialSuffix(50) {
						e.t.Fatalf("sequential child %s after an import with NextSequence 50: a suffix the source may have used", seq)
					}
				}
			},
		},
		{
			Name:        "Import/Bulk/AllOrNothing",
			Needs:       NeedsImport,
			Description: "an Import with one bad node (existing, or without a parent) changes nothing and names the node's index with ErrNodeExists or ErrNoParent; an empty Import and one over core.MaxImportBatch fail with ErrInvalidArgument, the latter naming the limit; a batch of exactly core.MaxImportBatch is accepted",
			run: func(e *env) {
				im, _ := core.Optional[core.Importer](e.c0)
				e.create(e.c0, p("taken"), []byte("x"), core.Persistent)
				before, err := e.c0.Snapshot(e.ctx, base)
				e.ok(err, "snapshot")
				for name, batch := range map[string][]core.ImportNode{
					"existing node": {{Path: p("fresh")}, {Path: p("taken")}},
					"no parent":     {{Path: p("fresh")}, {Path: p("missing", "child")}},
				} {
					err := im.Import(e.ctx, batch, core.Fence{})
					if core.FailedOpIndex(err) != 1 || !(errors.Is(err, core.ErrNodeExists) || errors.Is(err, core.ErrNoParent)) {
						e.t.Fatalf("%s: %v, want node 1 refused with ErrNodeExists or ErrNoParent", name, err)
					}
				}
				if err := im.Import(e.ctx, nil, core.Fence{}); !errors.Is(err, core.ErrInvalidArgument) {
					e.t.Fatalf("empty import: %v, want ErrInvalidArgument", err)
				}
				big := make([]core.ImportNode, core.MaxImportBatch+1)
				for i := range big {
					big[i] = core.ImportNode{Path: p("big", core.SequentialSuffix(int64(i)))}
				}
				big[0] = core.ImportNode{Path: p("big")}
				limit := strconv.Itoa(core.MaxImportBatch)
				if err := im.Import(e.ctx, big, core.Fence{}); !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), limit) {
					e.t.Fatalf("import of %d nodes: %v, want ErrInvalidArgument naming the limit %s", len(big), err, limit)
				}
				after, err := e.c0.Snapshot(e.ctx, base)
				e.ok(err, "snapshot")
				if len(after.Nodes) != len(before.Nodes) {
					e.t.Fatalf("refused imports changed the tree: %d nodes, then %d", len(before.Nodes), len(after.Nodes))
				}
				e.ok(im.Import(e.ctx, big[:core.MaxImportBatch], core.Fence{}), "import of exactly core.MaxImportBatch (%s) nodes", limit)
			},
		},
	}
}
