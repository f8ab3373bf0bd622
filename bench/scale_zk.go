package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/zktest"
)

// The scale. rows on ZooKeeper: the same tree file imported into a
// three-server ensemble (production settings: forceSync, the JVM's
// default collector, a heap of scaleZKHeap) with `migrate import`,
// validated with `migrate validate`, exported with `migrate export`, a
// coordinator started on it (cold start, memory, a tablet server's full
// snapshot), then three coordinators in the bench process, each on a
// ZooKeeper plugin of its own, for the failover row. ZooKeeper has no
// equivalent of raft snapshot save, restore or add-voter. Each step is
// bounded by scaleZKBound: a step past it ends the measurement at that
// size, and the report says which step and the bound.

const (
	// scaleZKBound bounds each ZooKeeper step (one verb, the cold start,
	// the failover rig's image loads).
	scaleZKBound = 10 * time.Minute
	// scaleZKHeap is each ZooKeeper server's JVM heap: a 1 000 000-node
	// tree of about 200-byte nodes takes about 1 GiB of it.
	scaleZKHeap = "-Xmx3g"
	// scaleZKServers is the ensemble's size.
	scaleZKServers = 3
	// scaleZKFailoverKills is the leader kills per size on ZooKeeper:
	// each killed member's coordinator reloads the tree from ZooKeeper
	// before the next kill (minutes at 1 000 000 nodes).
	scaleZKFailoverKills = 3
)

// measureScaleZK runs the ZooKeeper steps on a tree of about n nodes: the
// verbs and a coordinator (main), the failover row (failover). A step past
// the bound ends it: the figures so far come back with Unfinished set and
// a nil error. Every file and server it starts is gone when it returns.
func measureScaleZK(ctx context.Context, env *runEnv, tool string, n int, main, failover bool) (ScaleSize, *ScaleFailover, *ElectionDetail, error) {
	var sz ScaleSize
	dir := filepath.Join(env.opts.WorkDir, fmt.Sprintf("scale-zk-%d", n))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return sz, nil, nil, err
	}
	defer os.RemoveAll(dir)
	tree := filepath.Join(dir, "tree.jsonl")
	var err error
	if sz.Nodes, sz.DataBytes, err = writeScaleTree(tree, n); err != nil {
		return sz, nil, nil, fmt.Errorf("write the tree file: %w", err)
	}
	plugDir, err := env.binDir(ZooKeeper)
	if err != nil {
		return sz, nil, nil, err
	}
	zk, err := zktest.Start(zktest.Options{
		Servers: scaleZKServers, TickTime: zkTick, Production: true,
		Dir: filepath.Join(dir, "zookeeper"), StartTimeout: 90 * time.Second,
		JVMFlags: []string{scaleZKHeap}, Logf: env.opts.logf,
	})
	if err != nil {
		return sz, nil, nil, fmt.Errorf("start ZooKeeper: %w", err)
	}
	defer zk.Close()
	store := []string{"--no-env", "--quiet", "-D", "metadata.backend.plugin.dir=" + plugDir, "-D", "zookeeper.address=" + zk.ConnectString()}
	unfinished := func(err error) (ScaleSize, *ScaleFailover, *ElectionDetail, error) {
		if errors.Is(err, errScaleBound) {
			sz.Unfinished = err.Error()
			env.opts.logf("  scale (zookeeper): %d nodes: %v", sz.Nodes, err)
			return sz, nil, nil, nil
		}
		return sz, nil, nil, err
	}
	if err := scaleVerbs(ctx, &sz, tool, dir, tree, store, genericVerb, scaleZKBound, !main); err != nil {
		return unfinished(err)
	}
	env.opts.logf("  scale (zookeeper): %d nodes: import %.1f s, validate %.1f s, export %.1f s (0: not run)", sz.Nodes, sz.ImportSec, sz.ValidateSec, sz.ExportSec)
	if main {
		co, err := startScaleCoordinator(ctx, &sz, tool, dir, store, scaleZKBound)
		if err != nil {
			return unfinished(err)
		}
		co.profile = env.heapProfile(ZooKeeper, sz.Nodes)
		err = co.settledRSS(ctx, &sz)
		co.stop()
		if err != nil {
			return sz, nil, nil, err
		}
		// On ZooKeeper a tablet server reads the tree from ZooKeeper itself
		// (the coordinator serves no snapshot): a streamed snapshot through
		// a ZooKeeper plugin of its own, every page read and dropped.
		if err := zkTabletSnapshot(ctx, env, zk.ConnectString(), &sz); err != nil {
			return unfinished(err)
		}
		env.opts.logf("  scale (zookeeper): %d nodes: cold start %.1f s, coordinator %s, tablet snapshot %.1f s",
			sz.Nodes, sz.ColdStartSec, formatBytes(sz.CoordinatorRSSBytes), sz.TabletSnapshotSec)
	}
	if !failover {
		return sz, nil, nil, nil
	}
	f, detail := zkFailover(ctx, env, zk.ConnectString(), sz.Nodes)
	return sz, &f, detail, nil
}

// zkFailover runs the failover row on the ensemble at addr: three
// coordinators in the bench process, each on a ZooKeeper plugin of its
// own (a session each), scaleZKFailoverKills kills. A failure, or a wait
// past the bound, is in the figures' Unfinished (the other rows keep
// theirs).
func zkFailover(ctx context.Context, env *runEnv, addr string, nodes int) (ScaleFailover, *ElectionDetail) {
	f := ScaleFailover{Nodes: nodes}
	fail := func(err error) (ScaleFailover, *ElectionDetail) {
		f.Unfinished = err.Error()
		env.opts.logf("  scale.failover (zookeeper): %d nodes: %v", nodes, err)
		return f, nil
	}
	var ms []*member
	for i := 1; i <= scaleZKServers; i++ {
		m, err := env.newMember(ZooKeeper, fmt.Sprintf("ZooKeeper plugin %d", i), map[string]string{"zookeeper.address": addr}, false)
		if err != nil {
			return fail(err)
		}
		ms = append(ms, m)
	}
	t0 := time.Now()
	rig, err := newElectionRig(ctx, env, ZooKeeper, ms, core.ClientOptions{SessionTimeout: zkElectionSession}, false, scaleZKBound)
	if err != nil {
		return fail(err)
	}
	defer rig.Close()
	detail, err := failoverKills(ctx, env, rig, &f, t0, scaleZKFailoverKills, scaleZKBound)
	if err != nil {
		return fail(err)
	}
	return f, detail
}

// zkTabletSnapshot times a tablet server's full read of the tree on
// ZooKeeper: a client of a ZooKeeper plugin of its own streams a snapshot
// of the whole tree (the plugin's start not counted), bounded by
// scaleZKBound.
func zkTabletSnapshot(ctx context.Context, env *runEnv, addr string, sz *ScaleSize) error {
	m, err := env.newMember(ZooKeeper, "ZooKeeper plugin (a tablet server)", map[string]string{"zookeeper.address": addr}, false)
	if err != nil {
		return err
	}
	defer m.close()
	if err := m.start(ctx); err != nil {
		return err
	}
	c, err := m.client(ctx, core.ClientOptions{Name: "bench-scale-tablet"})
	if err != nil {
		return err
	}
	defer c.Close()
	bctx, cancel := context.WithTimeout(ctx, scaleZKBound)
	defer cancel()
	t0 := time.Now()
	sz.TabletSnapshotNodes = 0
	err = core.StreamSnapshot(bctx, c, "/", 0, func(_ int64, nodes []core.Node) error {
		sz.TabletSnapshotNodes += len(nodes)
		return nil
	})
	if err != nil && ctx.Err() == nil && bctx.Err() != nil {
		return fmt.Errorf("a tablet server's snapshot did not finish within %v: %w", scaleZKBound, errScaleBound)
	}
	if err != nil {
		return fmt.Errorf("a tablet server's snapshot: %w", err)
	}
	sz.TabletSnapshotSec = round3(time.Since(t0).Seconds())
	if sz.TabletSnapshotNodes < sz.Nodes {
		return fmt.Errorf("a tablet server's snapshot had %d nodes, the tree %d", sz.TabletSnapshotNodes, sz.Nodes)
	}
	return nil
}
