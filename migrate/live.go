package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
)

// ErrMigrationInProgress is returned by Live when the source or the target
// already carries a migration marker (catalog.MigrationPath): another
// migration runs, or one was interrupted and left it (its error names the
// marker's content and how to clear it).
var ErrMigrationInProgress = errors.New("migrate: a migration marker is present")

// Marker is the content of a migration marker (JSON).
type Marker struct {
	// ID names the migration (chosen by the tool: host, process, time).
	ID string `json:"id"`
	// Role is "source" or "target".
	Role string `json:"role"`
	// Phase is "copying", "fenced", "done" or "failed" (a source's);
	// "copying", "validated" or "failed" (a live migration's target), or
	// "importing" (an import's target).
	Phase string `json:"phase"`
	// Peer is the other store's backend name.
	Peer    string    `json:"peer"`
	Started time.Time `json:"started"`
	// Error is why a failed migration failed.
	Error string `json:"error,omitempty"`
	// Barrier is the last token the tool wrote into its fence during the
	// final scan (see tracker.barrier).
	Barrier int64 `json:"barrier,omitempty"`
}

// LiveOptions tune a live migration.
type LiveOptions struct {
	// Progress, when set, receives a line per round and per step.
	Progress io.Writer
	// MaxRounds bounds the copy rounds before the fence (default 10):
	// when the diff is not quiet by then, the source is fenced anyway and
	// the final scan copies the rest (a longer write pause).
	MaxRounds int
	// QuietNodes: a round that changed at most this many nodes ends the
	// copy rounds (default 100).
	QuietNodes int
	// FenceWait bounds the wait for the source's coordinator leader to
	// step down once the fence is set (default 30 s).
	FenceWait time.Duration
	// BatchBytes bounds the data of one batch; default 2 MiB.
	BatchBytes int
	// OwnerWait bounds the wait for the owner of a target's marker (a
	// run killed just now) to go with its session (default 60 s, above
	// the backends' default session timeouts; negative: no wait).
	OwnerWait time.Duration
	// ID names the migration in the markers; default host:pid:time.
	ID string
	// NoWatch: the final scan reads every node's stat (about 13 s per
	// 100 000 ZooKeeper nodes) instead of the paths a watch of the source
	// reported changed (a watch costs the source one more read of the
	// whole tree, at the start, and on ZooKeeper a copy of it in the
	// source's backend).
	NoWatch bool
	// BeforeFinal, when set, runs after the fence and before the final
	// scan: a test hook to inject failures.
	BeforeFinal func(ctx context.Context) error
	// AfterRound, when set, runs after each copy round (before the
	// fence): a test hook.
	AfterRound func(ctx context.Context, round int) error
}

// Round is one copy round of a live migration.
type Round struct {
	Round    int   `json:"round"`
	Revision int64 `json:"revision"`
	// Changed is how many nodes the round wrote or deleted on the target.
	Changed    int   `json:"changed"`
	DurationMS int64 `json:"duration_ms"`
}

// LiveResult is what a live migration did.
type LiveResult struct {
	ID     string  `json:"id"`
	Rounds []Round `json:"rounds"`
	// Quiet says the copy rounds reached a diff of at most QuietNodes.
	Quiet bool `json:"quiet"`
	// Final is the final scan, after the fence.
	Final Round `json:"final"`
	// FinalUnchanged says the final scan read nothing: the source's
	// revision showed no change since the consistent round before the
	// fence (the fence itself aside).
	FinalUnchanged bool `json:"final_unchanged"`
	// FinalWatched says the final scan read only the paths a watch of the
	// source reported changed since the checked round (FinalPaths of
	// them); false when it read every node's stat (Why says why).
	FinalWatched bool   `json:"final_watched"`
	FinalPaths   int    `json:"final_paths"`
	FinalWhy     string `json:"final_why,omitempty"`
	// PauseMS is the write pause: from the fence to the end of the
	// final validation.
	PauseMS int64 `json:"pause_ms"`
	// Nodes is how many persistent nodes the target holds; Ephemerals how
	// many ephemeral nodes of the source were not copied.
	Nodes        int  `json:"nodes"`
	Ephemerals   int  `json:"ephemerals_skipped"`
	KeptVersions bool `json:"kept_versions"`
	// SourceEpoch is the highest coordinator epoch of the source;
	// TargetEpoch what the target's /coordinators/epoch holds afterwards
	// (its leaders continue above it).
	SourceEpoch int64          `json:"source_epoch"`
	TargetEpoch int64          `json:"target_epoch"`
	Validate    ValidateResult `json:"validate"`
}

// Live copies src into dst while src keeps serving, then fences src and
// copies the rest, and validates dst against src's final state.
//
//  1. It claims both stores with a migration marker (catalog.MigrationPath,
//     a Marker): dst must be empty but for its root, or hold the partial
//     copy of a run that ended (claimTarget: emptied and taken over); a
//     marker on src is ErrMigrationInProgress unless it was left by a tool
//     that died (claimSource: its ephemeral owner MigrationOwnerPath is
//     gone), which is taken over. dst also gets the migration fence
//     (catalog.MigrationFencePath), so a coordinator started on it too
//     early refuses to lead, and its own owner.
//  2. Copy rounds: the first scans src top-down (batched reads, not one
//     snapshot: a serving store need not hold still); each later one is a
//     diff round (copier.diff: the stat of every node, the data of what
//     changed, the children where core.Stat.ChildrenRevision moved). Each
//     applies the difference from the previous round to dst, node by node
//     by {path, create and modify revision} (never a watch), until a round
//     changes at most QuietNodes nodes or MaxRounds rounds ran. One more
//     diff round is checked (the source's revision did not move during
//     it: its state at revision R), and dst is validated whole against
//     what the rounds copied.
//  3. Fence: one transaction on src creates the fence node (ephemeral, of
//     this client's session: a dead tool releases it) and, when
//     src has /coordinators/epoch, bumps it (so every fenced write of
//     a leader elected before fails with ErrFenced on a backend that
//     fences by that node, as ZooKeeper does). Coordinators refuse to lead
//     while the fence exists, and a leader that sees it resigns; Live waits
//     (FenceWait) until src reports no leader.
//  4. The final scan: when the fence applied at revision R+1 and src is
//     still at that revision after its leader stepped down, nothing
//     changed since the checked round (revisions strictly increase with
//     every change) and nothing is read. Otherwise diff rounds run until
//     one is a consistent state of src (its revision did not move, or it
//     found nothing changed), at most finalPasses: the pause grows by a
//     stat per node, not by a read of the tree. The nodes the final scan
//     wrote are validated; dst's /coordinators/epoch is raised to src's
//     highest epoch when lower; dst's marker says "validated"; src's fence
//     is made persistent (marker phase "done", in one transaction
//     checking that /coordinators/epoch did not move since the fence), and
//     dst's marker is removed: the cut-over.
//
// Any failure reverts: src's fence and marker are removed (its
// coordinators lead again; the epoch bump stays, epochs only grow), and
// dst keeps its marker and fence with phase "failed" and the error: a
// partial copy that no coordinator leads, which the next run into it
// empties once this run's session on it ended (claimTarget). Errors: ErrMigrationInProgress, ErrNotEmpty, validation
// differences, the backends'; each says that the source was reverted.
func Live(ctx context.Context, src, dst core.MetadataBackend, o LiveOptions) (res LiveResult, err error) {
	if o.MaxRounds <= 0 {
		o.MaxRounds = 10
	}
	if o.QuietNodes <= 0 {
		o.QuietNodes = 100
	}
	if o.FenceWait <= 0 {
		o.FenceWait = 30 * time.Second
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = 2 << 20
	}
	if o.OwnerWait == 0 {
		o.OwnerWait = 60 * time.Second
	}
	if o.ID == "" {
		host, _ := os.Hostname()
		o.ID = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), time.Now().UTC().Format(time.RFC3339))
	}
	res.ID = o.ID
	say := func(format string, args ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, format+"\n", args...)
		}
	}
	c := &copier{dst: dst, batchBytes: o.BatchBytes, prev: map[string]core.Node{}, touched: map[string]bool{}}
	c.im, c.bulk = core.Optional[core.Importer](dst)
	c.keep = c.bulk && dst.Capabilities().ImportKeepsVersions
	res.KeptVersions = c.keep

	started := time.Now().UTC()
	srcName, dstName := src.Capabilities().Name, dst.Capabilities().Name
	if err := claimTarget(ctx, src, dst, Marker{ID: o.ID, Role: "target", Phase: "copying", Peer: srcName, Started: started}, o.OwnerWait, say); err != nil {
		return res, err
	}
	srcMarker := Marker{ID: o.ID, Role: "source", Phase: "copying", Peer: dstName, Started: started}
	if err := claimSource(ctx, src, srcMarker, say); err != nil {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = dropMarker(dctx, dst)
		cancel()
		return res, fmt.Errorf("%w; the target's marker was removed", err)
	}
	fenced := false
	defer func() {
		if err == nil {
			return
		}
		rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		what := "the source was not fenced yet"
		if fenced {
			what = "the source's fence was removed"
		}
		if rerr := dropMarker(rctx, src); rerr != nil {
			err = fmt.Errorf("%w; REVERT FAILED: the source's marker %s could not be removed (%v): remove it with `metaplane migrate unfence` on the source", err, catalog.MigrationPath, rerr)
			return
		}
		failed := Marker{ID: o.ID, Role: "target", Phase: "failed", Peer: srcName, Started: started, Error: err.Error()}
		if _, serr := core.Set(rctx, dst, catalog.MigrationPath, markerData(failed), core.AnyVersion, core.Fence{}); serr != nil {
			say("could not record the failure in the target's marker: %v", serr)
		}
		err = fmt.Errorf("%w; reverted: %s and the source serves as before; the target keeps a partial copy, marked incomplete at %s (no coordinator leads it): empty it before another run", err, what, catalog.MigrationFencePath)
	}()

	// The watch that tells the final scan what to read: opened now, so
	// that its first read of the tree (on ZooKeeper) overlaps the copy
	// rounds.
	var trk *tracker
	if o.NoWatch {
		res.FinalWhy = "not asked for (NoWatch)"
	} else {
		trk = startTracker(ctx, src)
		defer trk.stop()
	}

	// Copy rounds.
	for r := 1; r <= o.MaxRounds; r++ {
		kind := readDiff
		if r == 1 {
			kind = readScan
		}
		rd, eph, _, err := c.round(ctx, src, r, kind, nil)
		if err != nil {
			return res, err
		}
		res.Ephemerals = eph
		res.Rounds = append(res.Rounds, rd)
		say("round %d: %d nodes changed at revision %d (%d ms); %d nodes copied", r, rd.Changed, rd.Revision, rd.DurationMS, len(c.prev))
		if o.AfterRound != nil {
			if err := o.AfterRound(ctx, r); err != nil {
				return res, err
			}
		}
		if r > 1 && rd.Changed <= o.QuietNodes {
			res.Quiet = true
			break
		}
	}
	if !res.Quiet {
		say("the source kept changing for %d rounds: fencing it anyway (the final scan copies the rest)", o.MaxRounds)
	}
	// One more round before the fence, checked consistent: when the
	// source's revision did not move during it, the target holds the
	// source's state at that revision (at), and when the fence is the
	// next revision and nothing follows it, the final scan reads nothing.
	at := int64(-1)
	if trk != nil {
		select {
		case <-trk.ready:
		default:
			say("waiting for the source's watch to open (it reads the tree once) ...")
		}
		if err := trk.open(ctx); err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			res.FinalWhy = err.Error()
			say("the final scan will read every node's stat: %v", err)
			trk = nil // its watch ended (stopped by the deferred stop)
		} else {
			// What the watch reported so far is read by this round.
			trk.clear()
		}
	}
	rd, eph, rr, err := c.round(ctx, src, len(res.Rounds)+1, readDiff, nil)
	if err != nil {
		return res, err
	}
	res.Rounds = append(res.Rounds, rd)
	res.Ephemerals, at = eph, rr.at
	say("round %d (checked): %d nodes changed at revision %d (%d ms)", rd.Round, rd.Changed, rd.Revision, rd.DurationMS)
	// The whole target is validated against what the rounds copied before
	// the fence (a difference fails the migration with the source never
	// fenced); after the final scan only what it wrote is.
	t1 := time.Now()
	res.Validate, err = Validate(ctx, dst, c.tree(srcName, rd.Revision), c.keep)
	if err != nil {
		return res, fmt.Errorf("validate: %w", err)
	}
	if n := len(res.Validate.Differences) + res.Validate.More; n > 0 {
		return res, fmt.Errorf("validate: %d differences between the target and the copy rounds' state of the source (first: %s %s)", n, res.Validate.Differences[0].Path, res.Validate.Differences[0].What)
	}
	clear(c.touched)
	say("validated the target before the fence: %d nodes (%d ms)", res.Validate.Nodes, time.Since(t1).Milliseconds())

	// Fence.
	epochOf := func() int64 { return sourceEpoch(ctx, src) }
	res.SourceEpoch = epochOf()
	pause := time.Now()
	fence := srcMarker
	fence.Phase = "fenced"
	// The fence is an ephemeral node of this tool's session: a tool that
	// dies (SIGKILL, its host lost) releases it when its session ends, and
	// the source's coordinators lead again. At the cut-over it is replaced
	// by a persistent one (below).
	ops := []core.Op{core.CreateOp(catalog.MigrationFencePath, markerData(fence), core.Ephemeral)}
	if rs, gerr := src.GetMany(ctx, []string{catalog.CoordinatorEpochPath}, core.ReadOptions{}); gerr == nil && rs[0].Err == nil {
		e, derr := catalog.DecodeEpoch(rs[0].Node.Data)
		if derr == nil {
			ops = append(ops, core.SetOp(catalog.CoordinatorEpochPath, []byte(strconv.FormatInt(e+1, 10)), rs[0].Node.Stat.Version))
		}
	}
	fr, err := src.Txn(ctx, ops, core.TxnOptions{})
	if err != nil {
		return res, fmt.Errorf("fence the source: %w", err)
	}
	fenced = true
	// Every leader elected on src bumps /coordinators/epoch: its version
	// now is checked at the cut-over (no leader led src since the fence).
	epochVersion := int64(-1)
	if rs, gerr := src.GetMany(ctx, []string{catalog.CoordinatorEpochPath}, core.ReadOptions{}); gerr == nil && rs[0].Err == nil {
		epochVersion = rs[0].Node.Stat.Version
	}
	say("source fenced (%s); waiting for its coordinator leader to step down", catalog.MigrationFencePath)
	if err := waitNoLeader(ctx, src, o.FenceWait); err != nil {
		return res, err
	}
	if o.BeforeFinal != nil {
		if err := o.BeforeFinal(ctx); err != nil {
			return res, err
		}
	}
	// The final scan. Revisions strictly increase with every change:
	// when the fence applied at the revision right after the checked
	// round's and the source is still at the fence's revision, no change
	// came between that round and now, and the target already holds the
	// source's final state. Otherwise diff rounds read the stats of every
	// node and what changed, until one is a consistent state of the
	// source (its revision did not move, or it found nothing changed).
	t0 := time.Now()
	now, err := currentRevision(ctx, src)
	if err != nil {
		return res, fmt.Errorf("final scan: %w", err)
	}
	if at >= 0 && fr.Revision == at+1 && now == fr.Revision {
		res.Final = Round{Round: len(res.Rounds) + 1, Revision: now, DurationMS: time.Since(t0).Milliseconds()}
		res.FinalUnchanged = true
		say("final scan: the source is at the fence's revision %d, right after the checked round's: nothing changed", now)
	} else if ws, why, err := c.watchedFinal(ctx, src, trk, fence, len(res.Rounds)+1, now, say); err != nil {
		return res, fmt.Errorf("final scan: %w", err)
	} else if trk != nil && why == nil {
		ws.fin.DurationMS = time.Since(t0).Milliseconds()
		res.Final, res.FinalWatched, res.FinalPaths = ws.fin, true, ws.paths
		if ws.read {
			res.Ephemerals = ws.eph
		}
		say("final scan (the source changed since revision %d: fence at %d, now %d): the watch reported %d paths; %d nodes changed at revision %d (%d ms)", at, fr.Revision, now, ws.paths, ws.fin.Changed, ws.fin.Revision, ws.fin.DurationMS)
	} else {
		if why != nil {
			if ctx.Err() != nil {
				return res, fmt.Errorf("final scan: %w", ctx.Err())
			}
			res.FinalWhy = why.Error()
			say("final scan: %v: reading every node's stat", why)
		}
		var fin Round
		var eph int
		var rr roundRead
		changed := 0
		kind := readDiff
		for pass := 1; ; pass++ {
			fin, eph, rr, err = c.round(ctx, src, len(res.Rounds)+1, kind, nil)
			if err != nil {
				return res, fmt.Errorf("final scan: %w", err)
			}
			changed += fin.Changed
			if rr.consistent() {
				break
			}
			if pass == finalPasses {
				return res, fmt.Errorf("final scan: %w: the source kept changing after the fence during %d read passes (a writer that does not honour %s?)", core.ErrUnavailable, finalPasses, catalog.MigrationFencePath)
			}
			if rr.unrecorded {
				// A source whose stats do not carry the children's
				// revision cannot show a diff read consistent while its
				// revision moves (a serving Raft quorum's session
				// renewals): one snapshot of it.
				kind = readSnapshot
				say("final scan, pass %d: %d nodes changed; the source moved during the pass and its stats do not carry the children's revision: reading one snapshot", pass, fin.Changed)
				continue
			}
			say("final scan, pass %d: %d nodes changed; the source moved during the pass: reading again", pass, fin.Changed)
		}
		fin.Changed, fin.DurationMS = changed, time.Since(t0).Milliseconds()
		res.Final, res.Ephemerals = fin, eph
		say("final scan (the source changed since revision %d: fence at %d, now %d): %d nodes changed at revision %d (%d ms)", at, fr.Revision, now, fin.Changed, fin.Revision, fin.DurationMS)
	}
	if err := continueSequences(ctx, dst, c.next); err != nil {
		return res, err
	}
	// The target was validated whole before the fence; the nodes the final
	// scan wrote or deleted are validated now (no one else writes the
	// target: it is marked and fenced).
	diffs, err := c.validateTouched(ctx)
	if err != nil {
		return res, fmt.Errorf("validate: %w", err)
	}
	if len(diffs) > 0 {
		res.Validate.Differences = append(res.Validate.Differences, diffs...)
		return res, fmt.Errorf("validate: %d differences between the target and the source's final state (first: %s %s)", len(diffs), diffs[0].Path, diffs[0].What)
	}
	res.Nodes = len(c.order)
	res.Validate.Nodes = res.Nodes
	if e := epochOf(); e > res.SourceEpoch {
		res.SourceEpoch = e
	}
	if res.TargetEpoch, err = continueEpoch(ctx, dst, res.SourceEpoch); err != nil {
		return res, err
	}
	// The target's marker says the copy is validated: a run killed from
	// here on leaves a target that a rerun does not empty while the
	// source is cut over to it (takeOverTarget).
	validated := Marker{ID: o.ID, Role: "target", Phase: "validated", Peer: srcName, Started: started}
	if _, err := core.Set(ctx, dst, catalog.MigrationPath, markerData(validated), core.AnyVersion, core.Fence{}); err != nil {
		return res, fmt.Errorf("mark the target validated: %w", err)
	}
	// The cut-over: src's ephemeral fence becomes a persistent one (src
	// stays fenced after this tool exits), in one transaction that fails
	// if the fence was lost (this tool's session ended) or a leader was
	// elected on src since the fence (the epoch node moved).
	done := fence
	done.Phase = "done"
	cut := []core.Op{
		core.DeleteOp(catalog.MigrationFencePath, core.AnyVersion),
		core.CreateOp(catalog.MigrationFencePath, markerData(done), core.Persistent),
		core.SetOp(catalog.MigrationPath, markerData(done), core.AnyVersion),
	}
	if epochVersion >= 0 {
		cut = append(cut, core.CheckOp(catalog.CoordinatorEpochPath, epochVersion))
	}
	if _, err := src.Txn(ctx, cut, core.TxnOptions{}); err != nil {
		return res, fmt.Errorf("make the source's fence permanent (was it lost with this tool's session, or did a coordinator lead the source since the fence?): %w", err)
	}
	res.PauseMS = time.Since(pause).Milliseconds()
	if err := dropMarker(ctx, dst); err != nil {
		return res, fmt.Errorf("remove the target's marker: %w", err)
	}
	say("validated: %d nodes; write pause %d ms", res.Nodes, res.PauseMS)
	return res, nil
}

func markerData(m Marker) []byte {
	b, _ := json.Marshal(m)
	return b
}

func describeMarker(ctx context.Context, b core.MetadataBackend) string {
	rs, err := b.GetMany(ctx, []string{catalog.MigrationPath}, core.ReadOptions{})
	if err != nil || rs[0].Err != nil {
		return catalog.MigrationPath + " exists"
	}
	var m Marker
	if json.Unmarshal(rs[0].Node.Data, &m) != nil {
		return fmt.Sprintf("%s holds %q", catalog.MigrationPath, rs[0].Node.Data)
	}
	s := fmt.Sprintf("%s of migration %s (%s, phase %s, started %s)", catalog.MigrationPath, m.ID, m.Role, m.Phase, m.Started.Format(time.RFC3339))
	if m.Error != "" {
		s += ": " + m.Error
	}
	return s
}

// claimTarget checks that dst is empty and creates its marker, its fence
// and its owner (an ephemeral node of this tool's session) in one
// transaction. A dst holding the partial copy of a live migration whose
// run ended (a target marker in phase "copying" or "failed" without its
// owner: the marker is the first thing a run writes, into an empty
// store, so what is below it is that run's copy) is emptied and claimed
// (said); a dst whose marker's run still holds it, an import's, a
// source's, or a validated copy whose source was cut over, refuses the
// run (ErrMigrationInProgress, naming what to do).
func claimTarget(ctx context.Context, src, dst core.MetadataBackend, m Marker, ownerWait time.Duration, say func(string, ...any)) error {
	snap, err := dst.Snapshot(ctx, "/")
	if err != nil {
		return fmt.Errorf("snapshot of the target: %w", err)
	}
	other, marked := "", false
	for _, n := range snap.Nodes {
		switch {
		case n.Path == "/":
		case isMarker(n.Path):
			marked = true
		case other == "":
			other = n.Path
		}
	}
	if marked {
		return takeOverTarget(ctx, src, dst, m, snap.Nodes, ownerWait, say)
	}
	if other != "" {
		return fmt.Errorf("%w: it holds %s (and maybe more); live-migrate into an empty store", ErrNotEmpty, other)
	}
	_, err = dst.Txn(ctx, []core.Op{
		core.CreateOp(catalog.MigrationPath, markerData(m), core.Persistent),
		core.CreateOp(catalog.MigrationFencePath, markerData(m), core.Persistent),
		core.CreateOp(MigrationOwnerPath, []byte(m.ID), core.Ephemeral),
	}, core.TxnOptions{})
	if errors.Is(err, core.ErrNodeExists) {
		return fmt.Errorf("%w on the target: %s", ErrMigrationInProgress, describeMarker(ctx, dst))
	}
	if err != nil {
		return fmt.Errorf("mark the target: %w", err)
	}
	return nil
}

// takeOverTarget is claimTarget for a dst carrying a marker: nodes is
// its snapshot. While the marker's owner lives it waits, at most
// ownerWait, for its session to end (a run killed just now: its session
// ends within the target's session timeout).
func takeOverTarget(ctx context.Context, src, dst core.MetadataBackend, m Marker, nodes []core.Node, ownerWait time.Duration, say func(string, ...any)) error {
	desc := describeMarker(ctx, dst)
	claimed := []string{catalog.MigrationPath, MigrationOwnerPath, catalog.MigrationFencePath}
	rs, err := dst.GetMany(ctx, claimed, core.ReadOptions{})
	deadline := time.Now().Add(ownerWait)
	for waited := false; err == nil && rs[1].Err == nil && rs[0].Err == nil && time.Now().Before(deadline); {
		if !waited {
			say("the target carries %s, held by its owner %s: waiting up to %s for its run's session to end", desc, MigrationOwnerPath, ownerWait)
			waited = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		rs, err = dst.GetMany(ctx, claimed, core.ReadOptions{})
	}
	if err != nil {
		return fmt.Errorf("%w on the target: %s (and reading it failed: %v)", ErrMigrationInProgress, desc, err)
	}
	var old Marker
	if rs[0].Err != nil || json.Unmarshal(rs[0].Node.Data, &old) != nil {
		return fmt.Errorf("%w on the target: %s, not a live migration's target marker: use an empty store", ErrMigrationInProgress, desc)
	}
	switch {
	case old.Role != "target":
		return fmt.Errorf("%w on the target: %s: this store was the source of a migration, not a target: use an empty store (or `metaplane migrate unfence` on it to roll that migration back)", ErrMigrationInProgress, desc)
	case old.Phase == "importing":
		return fmt.Errorf("%w on the target: %s: an import that stopped: complete it with `metaplane migrate import --resume`, or use an empty store", ErrMigrationInProgress, desc)
	case rs[1].Err == nil:
		return fmt.Errorf("%w on the target: %s, held by a running tool (its owner %s was alive for %s; a tool killed just now releases it when its session ends, within the target's session timeout)", ErrMigrationInProgress, desc, MigrationOwnerPath, ownerWait)
	case !errors.Is(rs[1].Err, core.ErrNotFound):
		return fmt.Errorf("%w on the target: %s (reading its owner failed: %v)", ErrMigrationInProgress, desc, rs[1].Err)
	case old.Phase == "validated":
		// Killed around the cut-over: when the source was cut over to
		// this copy, it is the migration's result.
		if srs, err := src.GetMany(ctx, []string{catalog.MigrationPath}, core.ReadOptions{}); err != nil || srs[0].Err == nil {
			var sm Marker
			if err != nil || json.Unmarshal(srs[0].Node.Data, &sm) != nil || sm.Phase == "done" {
				return fmt.Errorf("%w on the target: %s: a validated copy, and the source carries %s: the run was killed at the cut-over: finish it with `metaplane migrate unfence` on the target, or roll back with `metaplane migrate unfence` on the source", ErrMigrationInProgress, desc, describeMarker(ctx, src))
			}
		}
	}
	say("the target holds the partial copy of %s, left by a run that ended (its owner %s is gone): emptying it and taking over", desc, MigrationOwnerPath)
	claim := []core.Op{
		core.CheckOp(catalog.MigrationPath, rs[0].Node.Stat.Version),
		core.SetOp(catalog.MigrationPath, markerData(m), core.AnyVersion),
		core.CreateOp(MigrationOwnerPath, []byte(m.ID), core.Ephemeral),
	}
	if errors.Is(rs[2].Err, core.ErrNotFound) {
		claim = append(claim, core.CreateOp(catalog.MigrationFencePath, markerData(m), core.Persistent))
	}
	if _, err := dst.Txn(ctx, claim, core.TxnOptions{}); err != nil {
		if errors.Is(err, core.ErrNodeExists) || errors.Is(err, core.ErrBadVersion) {
			return fmt.Errorf("%w on the target: %s (another run claimed it meanwhile)", ErrMigrationInProgress, describeMarker(ctx, dst))
		}
		return fmt.Errorf("claim the target: %w", err)
	}
	// Empty it, children first; the marker and its fence stay.
	var paths []string
	for _, n := range nodes {
		if n.Path != "/" && !isMarker(n.Path) {
			paths = append(paths, n.Path)
		}
	}
	sort.Slice(paths, func(i, j int) bool { return pathLess(paths[i], paths[j]) })
	for i := len(paths) - 1; i >= 0; i -= 100 {
		lo := max(0, i-99)
		ops := make([]core.Op, 0, i-lo+1)
		for j := i; j >= lo; j-- {
			ops = append(ops, core.DeleteOp(paths[j], core.AnyVersion))
		}
		if _, err := dst.Txn(ctx, ops, core.TxnOptions{}); err != nil {
			return fmt.Errorf("empty the target's partial copy (the marker stays; a rerun goes on emptying it): %w", err)
		}
	}
	return nil
}

// dropMarker removes the marker, the fence and the owner, whichever exist.
func dropMarker(ctx context.Context, b core.MetadataBackend) error {
	for _, p := range []string{catalog.MigrationFencePath, MigrationOwnerPath, catalog.MigrationPath} {
		if err := core.Delete(ctx, b, p, core.AnyVersion, core.Fence{}); err != nil && !errors.Is(err, core.ErrNotFound) {
			return fmt.Errorf("delete %s: %w", p, err)
		}
	}
	return nil
}

// MigrationOwnerPath is the source's owner node: an ephemeral node of the
// running tool's session, created with the source's marker. A marker
// without it was left by a tool that died.
const MigrationOwnerPath = catalog.MigrationPath + "/owner"

// claimSource creates src's marker and its owner (ephemeral) in one
// transaction. A marker already present refuses the run
// (ErrMigrationInProgress) when its owner lives (a running migration) or
// its phase is "done" (src was cut over: `migrate unfence` rolls it back);
// a marker in phase "copying" or "fenced" without its owner was left by a
// tool that died: it is removed (with its fence, if any), said, and the
// claim made again.
func claimSource(ctx context.Context, src core.MetadataBackend, m Marker, say func(string, ...any)) error {
	claim := []core.Op{
		core.CreateOp(catalog.MigrationPath, markerData(m), core.Persistent),
		core.CreateOp(MigrationOwnerPath, []byte(m.ID), core.Ephemeral),
	}
	_, err := src.Txn(ctx, claim, core.TxnOptions{})
	if !errors.Is(err, core.ErrNodeExists) {
		if err != nil {
			return fmt.Errorf("mark the source: %w", err)
		}
		return nil
	}
	desc := describeMarker(ctx, src)
	rs, gerr := src.GetMany(ctx, []string{catalog.MigrationPath, MigrationOwnerPath}, core.ReadOptions{})
	if gerr != nil {
		return fmt.Errorf("%w on the source: %s (and reading it failed: %v)", ErrMigrationInProgress, desc, gerr)
	}
	var old Marker
	if rs[0].Err == nil {
		_ = json.Unmarshal(rs[0].Node.Data, &old)
	}
	switch {
	case rs[1].Err == nil:
		return fmt.Errorf("%w on the source: %s, held by a running tool (its owner %s is alive; a tool killed just now releases it when its session ends, within the source's session timeout: retry then)", ErrMigrationInProgress, desc, MigrationOwnerPath)
	case !errors.Is(rs[1].Err, core.ErrNotFound):
		return fmt.Errorf("%w on the source: %s (reading its owner failed: %v)", ErrMigrationInProgress, desc, rs[1].Err)
	case old.Phase == "done":
		return fmt.Errorf("%w on the source: %s: the source was cut over to another store; `metaplane migrate unfence` on the source rolls that back", ErrMigrationInProgress, desc)
	}
	say("the source carries %s, left by a tool that died (its owner %s is gone): removing it and taking over", desc, MigrationOwnerPath)
	if err := dropMarker(ctx, src); err != nil {
		return fmt.Errorf("remove the marker a dead run left on the source: %w", err)
	}
	if _, err := src.Txn(ctx, claim, core.TxnOptions{}); err != nil {
		if errors.Is(err, core.ErrNodeExists) {
			return fmt.Errorf("%w on the source: %s (another run claimed it meanwhile)", ErrMigrationInProgress, describeMarker(ctx, src))
		}
		return fmt.Errorf("mark the source: %w", err)
	}
	return nil
}

// Unfence removes b's migration marker and fence (a source rolled back,
// or a marker an interrupted run left); it returns the marker it removed
// ("" when there was none).
func Unfence(ctx context.Context, b core.MetadataBackend) (string, error) {
	rs, err := b.GetMany(ctx, []string{catalog.MigrationPath}, core.ReadOptions{})
	if err != nil {
		return "", err
	}
	if rs[0].Err != nil {
		if errors.Is(rs[0].Err, core.ErrNotFound) {
			return "", nil
		}
		return "", rs[0].Err
	}
	desc := describeMarker(ctx, b)
	return desc, dropMarker(ctx, b)
}

// noLeaderSettle is how long src must go on reporting no leader: a
// standby elected as the leader stepped down resigns on the fence at
// once, but its election changes the tree first.
const noLeaderSettle = 300 * time.Millisecond

// waitNoLeader waits until src reports no coordinator leader, twice,
// noLeaderSettle apart.
func waitNoLeader(ctx context.Context, src core.MetadataBackend, d time.Duration) error {
	deadline := time.Now().Add(d)
	var since time.Time
	for {
		l, err := src.Leader(ctx)
		if errors.Is(err, core.ErrNotFound) {
			if since.IsZero() {
				since = time.Now()
			}
			if time.Since(since) >= noLeaderSettle {
				return nil
			}
		} else {
			since = time.Time{}
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("the source's leader did not step down within %s after the fence: %w", d, err)
			}
			return fmt.Errorf("the source's leader %s (epoch %d) did not step down within %s after the fence: is it a coordinator that does not honour %s?", l.ID, l.Epoch, d, catalog.MigrationFencePath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// sourceEpoch is the highest coordinator epoch src shows: its leader's,
// its status's, and its /coordinators/epoch node's.
func sourceEpoch(ctx context.Context, src core.MetadataBackend) int64 {
	var e int64
	if l, err := src.Leader(ctx); err == nil {
		e = l.Epoch
	}
	if st, err := src.Status(ctx); err == nil && st.Epoch > e {
		e = st.Epoch
	}
	if rs, err := src.GetMany(ctx, []string{catalog.CoordinatorEpochPath}, core.ReadOptions{}); err == nil && rs[0].Err == nil {
		if v, err := catalog.DecodeEpoch(rs[0].Node.Data); err == nil && v > e {
			e = v
		}
	}
	return e
}

// continueEpoch makes dst's /coordinators/epoch at least epoch (a
// ZooKeeper target's next leader takes the node's value + 1; a Raft
// target's leaders take epochs above it), and returns what it holds.
func continueEpoch(ctx context.Context, dst core.MetadataBackend, epoch int64) (int64, error) {
	rs, err := dst.GetMany(ctx, []string{catalog.CoordinatorEpochPath}, core.ReadOptions{})
	if err != nil {
		return 0, fmt.Errorf("read the target's epoch: %w", err)
	}
	data := []byte(strconv.FormatInt(epoch, 10))
	switch {
	case rs[0].Err == nil:
		if v, derr := catalog.DecodeEpoch(rs[0].Node.Data); derr == nil && v >= epoch {
			return v, nil
		}
		_, err = core.Set(ctx, dst, catalog.CoordinatorEpochPath, data, rs[0].Node.Stat.Version, core.Fence{})
	case errors.Is(rs[0].Err, core.ErrNotFound):
		_, _, err = core.Create(ctx, dst, catalog.CoordinatorEpochPath, data, core.CreateOptions{MakeParents: true})
	default:
		err = rs[0].Err
	}
	if err != nil {
		return 0, fmt.Errorf("continue the epoch on the target (%s = %d): %w", catalog.CoordinatorEpochPath, epoch, err)
	}
	return epoch, nil
}

// copier applies a source's successive snapshots to the target.
type copier struct {
	dst        core.MetadataBackend
	im         core.Importer
	bulk, keep bool
	batchBytes int
	// prev is the source's state the target holds: the last snapshot
	// applied (persistent nodes, no marker).
	prev  map[string]core.Node
	order []core.Node // prev in path order
	next  map[string]int64
	// known is every node of the source the last round read (the root
	// and ephemerals included, the marker not), in path order: what the
	// next diff round compares the source's stats with.
	known []core.Node
	// touched holds the paths the rounds wrote or deleted on the target
	// since the last validation.
	touched map[string]bool
}

// finalPasses bounds the final scan's diff rounds.
const finalPasses = 5

// scanBatch is how many paths one read of a scan asks for.
const scanBatch = 256

// scan reads every node of src top-down, in batches, without a snapshot:
// each node's data and stat are as of its own read, so a scan of a store
// that keeps changing is not one consistent state, but every node it
// reports carries the create and modify revision it was read at, and the
// next round's scan sees what changed since. A node deleted between its
// parent's listing and its read is left out. The revision returned is the
// highest modify revision seen.
func scan(ctx context.Context, src core.MetadataBackend, roots ...string) ([]core.Node, int64, error) {
	var nodes []core.Node
	var rev int64
	queue := append([]string(nil), roots...)
	if len(queue) == 0 {
		queue = []string{"/"}
	}
	for len(queue) > 0 {
		batch := queue[:min(len(queue), scanBatch)]
		queue = queue[len(batch):]
		rs, err := src.GetMany(ctx, batch, core.ReadOptions{})
		if err != nil {
			return nil, 0, err
		}
		var parents []*core.Node
		for i := range rs {
			r := &rs[i]
			if errors.Is(r.Err, core.ErrNotFound) {
				continue
			}
			if r.Err != nil {
				return nil, 0, fmt.Errorf("read %s: %w", r.Node.Path, r.Err)
			}
			if isMarker(r.Node.Path) {
				continue
			}
			nodes = append(nodes, r.Node)
			rev = max(rev, r.Node.Stat.ModifyRevision, r.Node.Stat.CreateRevision)
			if r.Node.Stat.NumChildren > 0 {
				parents = append(parents, &r.Node)
			}
		}
		// The listings run concurrently (a node deleted meanwhile has
		// none: the next round sees it gone).
		kids := make([][]string, len(parents))
		if err := (&walker{src: src}).listChildren(ctx, parents, kids); err != nil {
			return nil, 0, err
		}
		for i, p := range parents {
			for _, n := range kids[i] {
				queue = append(queue, core.JoinPath(p.Path, n))
			}
		}
	}
	return nodes, rev, nil
}

// readKind is how a round reads the source.
type readKind int

const (
	// readScan reads the whole tree (scan).
	readScan readKind = iota
	// readDiff reads the stats of the nodes the last round read and, of
	// those, what changed (diff): proportional to the changes, plus one
	// stat per node.
	readDiff
	// readSnapshot reads one src.Snapshot: one consistent state by the
	// contract, the whole tree read at once.
	readSnapshot
	// readWatched reads the paths round is given (those the source's
	// watch reported changed) and keeps the rest of the last round's
	// nodes (copier.patch).
	readWatched
)

// roundRead is what a round's read proved about the source.
type roundRead struct {
	// at is the source's revision when the read is its state at that one
	// revision (the revision did not move during the read), else -1.
	at int64
	// quiet says a diff read found no node changed since the last round
	// and every stat carried its children's revision: the source held
	// the last round's state throughout, one consistent state.
	quiet bool
	// unrecorded says a stat lacked its children's revision: a diff read
	// of such a source is consistent only when its revision holds still.
	unrecorded bool
}

// consistent says the read is one state of the source.
func (rr roundRead) consistent() bool { return rr.at >= 0 || rr.quiet }

// round reads the source (kind; with readWatched, the paths watched) and
// applies its difference from the last round to the target; it returns
// the round, how many ephemerals the source held, and what the read
// proved.
func (c *copier) round(ctx context.Context, src core.MetadataBackend, r int, kind readKind, watched []string) (Round, int, roundRead, error) {
	t0 := time.Now()
	var snap core.Snapshot
	rr := roundRead{at: -1}
	// A watched read is proven complete by the tracker's barriers, not by
	// the source's revision: it reads no revision (two round trips less
	// per pass, inside the write pause).
	probe := kind != readWatched
	var rev0 int64
	var err error
	if probe {
		if rev0, err = currentRevision(ctx, src); err != nil {
			return Round{}, 0, rr, err
		}
	}
	switch {
	case kind == readSnapshot:
		snap, err = src.Snapshot(ctx, "/")
		rr.at = snap.Revision
	case kind == readWatched:
		snap.Nodes, snap.Revision, err = c.patch(ctx, src, watched)
	case kind == readDiff && c.known != nil:
		var sound bool
		snap.Nodes, snap.Revision, rr.quiet, sound, err = c.diff(ctx, src)
		rr.unrecorded = !sound
	default:
		snap.Nodes, snap.Revision, err = scan(ctx, src)
	}
	if err != nil {
		return Round{}, 0, rr, fmt.Errorf("read of the source: %w", err)
	}
	if probe {
		rev1, err := currentRevision(ctx, src)
		if err != nil {
			return Round{}, 0, rr, err
		}
		if rev0 == rev1 {
			// Nothing changed on the source during the read: its state at
			// rev0.
			rr.at, snap.Revision = rev0, rev0
		}
	}
	cur := make([]core.Node, 0, len(snap.Nodes))
	eph := 0
	for _, n := range snap.Nodes {
		switch {
		case n.Path == "/" || isMarker(n.Path):
		case n.Stat.EphemeralOwner != 0:
			eph++
		default:
			cur = append(cur, n)
		}
	}
	sort.Slice(cur, func(i, j int) bool { return pathLess(cur[i].Path, cur[j].Path) })
	next := nextSequences(snap.Nodes)
	curMap := make(map[string]core.Node, len(cur))
	for _, n := range cur {
		curMap[n.Path] = n
	}
	var deletes []string
	var creates []Node
	var sets []core.Op
	// A node gone or recreated on the source is deleted on the target with
	// everything below it there (a scan may have read a child under the
	// parent's earlier incarnation); what the source still has below it
	// is created again.
	gone := map[string]bool{}
	for _, p := range c.order {
		n, ok := curMap[p.Path]
		if !ok || n.Stat.CreateRevision != p.Stat.CreateRevision || gone[parentOf(p.Path)] {
			gone[p.Path] = true
			deletes = append(deletes, p.Path)
		}
	}
	changed := len(deletes)
	for _, n := range cur {
		p, ok := c.prev[n.Path]
		switch {
		case !ok || gone[n.Path]:
			creates = append(creates, nodeOf(n, next[n.Path]))
		case n.Stat.ModifyRevision != p.Stat.ModifyRevision || n.Stat.Version != p.Stat.Version:
			changed++
			k := int64(1)
			if c.keep && n.Stat.Version > p.Stat.Version {
				k = n.Stat.Version - p.Stat.Version // one set per version step
			}
			for i := int64(0); i < k; i++ {
				sets = append(sets, core.SetOp(n.Path, n.Data, core.AnyVersion))
			}
		}
	}
	changed += len(creates)
	for _, p := range deletes {
		c.touched[p] = true
	}
	for _, n := range creates {
		c.touched[n.Path] = true
	}
	for _, op := range sets {
		c.touched[op.Path] = true
	}
	// Deletes children first, creates parents first, then sets.
	for i := len(deletes) - 1; i >= 0; i -= 100 {
		lo := max(0, i-99)
		ops := make([]core.Op, 0, i-lo+1)
		for j := i; j >= lo; j-- {
			ops = append(ops, core.DeleteOp(deletes[j], core.AnyVersion))
		}
		if _, err := c.dst.Txn(ctx, ops, core.TxnOptions{}); err != nil {
			return Round{}, 0, rr, fmt.Errorf("delete on the target: %w", err)
		}
	}
	if err := c.create(ctx, creates); err != nil {
		return Round{}, 0, rr, err
	}
	for len(sets) > 0 {
		n, size := 0, 0
		for n < len(sets) && n < 100 && (n == 0 || size+len(sets[n].Data) <= c.batchBytes) {
			size += len(sets[n].Data)
			n++
		}
		if _, err := c.dst.Txn(ctx, sets[:n], core.TxnOptions{}); err != nil {
			return Round{}, 0, rr, fmt.Errorf("update on the target: %w", err)
		}
		sets = sets[n:]
	}
	c.prev, c.order, c.next = curMap, cur, next
	c.known = make([]core.Node, 0, len(snap.Nodes))
	for _, n := range snap.Nodes {
		if !isMarker(n.Path) {
			c.known = append(c.known, n)
		}
	}
	sort.Slice(c.known, func(i, j int) bool { return pathLess(c.known[i].Path, c.known[j].Path) })
	return Round{Round: r, Revision: snap.Revision, Changed: changed, DurationMS: time.Since(t0).Milliseconds()}, eph, rr, nil
}

// create writes nodes (in path order) in batches.
func (c *copier) create(ctx context.Context, nodes []Node) error {
	for len(nodes) > 0 {
		n, size := 0, 0
		for n < len(nodes) && n < core.MaxImportBatch && (n == 0 || size+len(nodes[n].Data) <= c.batchBytes) {
			size += len(nodes[n].Data)
			n++
		}
		var err error
		if c.bulk {
			err = importBatch(ctx, c.im, nodes[:n])
		} else {
			err = createBatch(ctx, c.dst, nodes[:n])
		}
		if err != nil {
			return err
		}
		nodes = nodes[n:]
	}
	return nil
}

// seqProbe is the name prefix of the sequential nodes continueSequences
// creates (and deletes) to move a parent's sequential counter on.
const seqProbe = "metaplane-migration-probe-"

// probeBatch is how many probes one transaction creates; maxProbes
// bounds the probes under one parent.
const (
	probeBatch = 500
	maxProbes  = 200000
)

// continueSequences makes the next sequential child of every parent in
// next (parent -> one above the highest 10-digit suffix among its children
// on the source) get at least that suffix on dst: a target loaded without
// an Importer, or whose parent got its sequential children one by one in
// live rounds, counts its suffixes from the creates it saw, which may be
// below the source's when the source also deleted some. It creates a
// sequential probe child and deletes it; when the probe's suffix is below
// the source's next one, it creates (and deletes) as many more probes as
// the gap, in transactions of probeBatch. One probe per parent when the
// counter is right.
func continueSequences(ctx context.Context, dst core.MetadataBackend, next map[string]int64) error {
	parents := make([]string, 0, len(next))
	for p, n := range next {
		if n > 0 {
			parents = append(parents, p)
		}
	}
	sort.Strings(parents)
	for _, parent := range parents {
		probe := core.JoinPath(parent, seqProbe)
		gap := int64(1)
		for probes := int64(0); gap > 0; probes += probeBatch {
			if probes > maxProbes {
				return fmt.Errorf("continue the sequential names under %s: %d probes did not reach suffix %d: not a sequential family?", parent, maxProbes, next[parent])
			}
			ops := make([]core.Op, min(gap, probeBatch))
			for i := range ops {
				ops[i] = core.CreateOp(probe, nil, core.PersistentSequential)
			}
			res, err := dst.Txn(ctx, ops, core.TxnOptions{})
			if err != nil {
				return fmt.Errorf("continue the sequential names under %s: %w", parent, err)
			}
			del := make([]core.Op, len(res.Results))
			for i, r := range res.Results {
				del[i] = core.DeleteOp(r.Path, core.AnyVersion)
			}
			if _, err := dst.Txn(ctx, del, core.TxnOptions{}); err != nil {
				return fmt.Errorf("continue the sequential names under %s: delete the probes: %w", parent, err)
			}
			last, ok := sequenceOf(res.Results[len(res.Results)-1].Path)
			if !ok {
				break
			}
			gap = next[parent] - 1 - last
		}
	}
	return nil
}

// validateTouched compares the target's nodes at the paths the rounds
// wrote or deleted since the last validation with the last applied state:
// present with the same data (and version, where the target keeps them)
// or absent.
func (c *copier) validateTouched(ctx context.Context) ([]Difference, error) {
	paths := make([]string, 0, len(c.touched))
	for p := range c.touched {
		paths = append(paths, p)
	}
	sort.Slice(paths, func(i, j int) bool { return pathLess(paths[i], paths[j]) })
	rs, err := readBatches(ctx, c.dst, len(paths), func(i int) string { return paths[i] }, core.ReadOptions{})
	if err != nil {
		return nil, err
	}
	var out []Difference
	for i, p := range paths {
		want, ok := c.prev[p]
		r := &rs[i]
		switch {
		case r.Err != nil && !errors.Is(r.Err, core.ErrNotFound):
			return nil, fmt.Errorf("read the target's %s: %w", p, r.Err)
		case !ok && r.Err == nil && r.Node.Stat.EphemeralOwner == 0:
			out = append(out, Difference{Path: p, What: "extra"})
		case ok && (r.Err != nil || r.Node.Stat.EphemeralOwner != 0):
			out = append(out, Difference{Path: p, What: "missing"})
		case ok && string(r.Node.Data) != string(want.Data):
			out = append(out, Difference{Path: p, What: "data", Detail: fmt.Sprintf("%d bytes on the target, %d on the source", len(r.Node.Data), len(want.Data))})
		case ok && c.keep && r.Node.Stat.Version != want.Stat.Version:
			out = append(out, Difference{Path: p, What: "version", Detail: fmt.Sprintf("version %d on the target, %d on the source", r.Node.Stat.Version, want.Stat.Version)})
		}
	}
	clear(c.touched)
	return out, nil
}

// tree is the last applied snapshot as a Tree.
func (c *copier) tree(source string, rev int64) *Tree {
	t := &Tree{Header: Header{Source: source, Revision: rev, Created: time.Now().UTC()}, Nodes: make([]Node, len(c.order))}
	for i, n := range c.order {
		t.Nodes[i] = nodeOf(n, c.next[n.Path])
	}
	return t
}
