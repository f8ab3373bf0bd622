package raft

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lni/dragonboat/v4"
	dbconfig "github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftpb"
	"github.com/lni/dragonboat/v4/tools"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/ports"
)

// The offline tools below work on a member's coordinator.raft.dir while
// no coordinator runs on it: Bootstrap formats an empty directory, Restore
// makes a new single-voter cluster from a tree, UnsafeRecover rewrites a
// survivor's membership to itself alone. Each refuses a directory whose
// NodeHost lock another process holds.

// ErrDirInUse is wrapped by the offline tools' refusal of a directory that
// a running member holds.
var ErrDirInUse = errors.New("raft: data directory in use")

// checkNotInUse refuses dir while another process holds its NodeHost
// lock (Dragonboat's LOCK file, an fcntl lock held by a running member).
func checkNotInUse(dir string) error {
	p := filepath.Join(dir, nodeHostDir, "LOCK")
	if _, err := os.Stat(p); err != nil {
		return nil
	}
	l, err := vfs.Default.Lock(p)
	if err != nil {
		return fmt.Errorf("%w: %s is locked by a running process (a coordinator or its Raft plugin): stop it first", ErrDirInUse, dir)
	}
	return l.Close()
}

// checkEmptyDir accepts a directory that does not exist or is empty.
func checkEmptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %v", core.ErrInvalidArgument, err)
	}
	if len(ents) > 0 {
		return fmt.Errorf("%w: %s is not empty (it holds %s): choose an empty or new directory", core.ErrInvalidArgument, dir, ents[0].Name())
	}
	return nil
}

// loopbackAddress is a free loopback address for a member that must not
// be reached while an offline tool runs it: a port below the kernel's
// ephemeral range (internal/ports), which no outgoing connection takes
// between the pick and the member's bind.
func loopbackAddress() (string, error) {
	p, err := ports.Free()
	if err != nil {
		return "", fmt.Errorf("%w: %v", core.ErrUnavailable, err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

// selfVoter is the member's own entry of o.Voters (o with defaults).
func selfVoter(o Options) (Voter, error) {
	for _, v := range o.Voters {
		if v.ID == o.NodeID {
			return v, nil
		}
	}
	return Voter{}, fmt.Errorf("%w: coordinator.raft.node.id %d is not in coordinator.raft.voters", core.ErrInvalidArgument, o.NodeID)
}

// BootstrapResult says what Bootstrap wrote.
type BootstrapResult struct {
	ClusterID uint64
	NodeID    uint64
	Voters    []Voter
	// DiskWarning, when not empty, says that the directory's free space
	// is below coordinator.raft.disk.min-free: the member will start with
	// its replica paused until space is freed.
	DiskWarning string
}

// Bootstrap formats the empty (or missing) directory o.Dir as member
// o.NodeID of a new cluster of o.Voters: the cluster id (derived from the
// voters, so every member's bootstrap writes the same one) and the initial
// membership in the Raft log. The member's coordinator then restarts from
// it. It refuses a directory that is not empty, a node id missing from the
// voters, and two voters with the same id or address. The member listens
// on an ephemeral loopback port while it formats, so a running process on
// its Raft port does not matter. It formats a directory whose free space
// is below coordinator.raft.disk.min-free too (the member then starts
// paused until space is freed), and says so in DiskWarning.
// Errors: ErrInvalidArgument, ErrUnavailable.
func Bootstrap(ctx context.Context, o Options) (BootstrapResult, error) {
	o = o.withDefaults()
	if err := o.Validate(); err != nil {
		return BootstrapResult{}, fmt.Errorf("%w: %v", core.ErrInvalidArgument, err)
	}
	if o.Join {
		return BootstrapResult{}, fmt.Errorf("%w: coordinator.raft.join is set: a joining member is not bootstrapped (it starts empty and add-voter adds it)", core.ErrInvalidArgument)
	}
	if _, err := selfVoter(o); err != nil {
		return BootstrapResult{}, err
	}
	var err error
	addrs := map[string]uint64{}
	for _, v := range o.Voters {
		if other, ok := addrs[v.Address]; ok {
			return BootstrapResult{}, fmt.Errorf("%w: coordinator.raft.voters: voters %d and %d share the address %s", core.ErrInvalidArgument, other, v.ID, v.Address)
		}
		addrs[v.Address] = v.ID
	}
	if err := checkEmptyDir(o.Dir); err != nil {
		return BootstrapResult{}, err
	}
	if o.ListenAddress, err = loopbackAddress(); err != nil {
		return BootstrapResult{}, err
	}
	// A bootstrap has nothing to wait for: the others are not running.
	o.FirstElectionTimeout = time.Millisecond
	o.format = true
	m, err := startMember(ctx, o)
	if err != nil {
		return BootstrapResult{}, err
	}
	m.close()
	res := BootstrapResult{ClusterID: m.clusterID, NodeID: o.NodeID, Voters: o.Voters}
	if free, err := o.storage.free(o.Dir); err == nil && free < uint64(o.DiskMinFree) {
		res.DiskWarning = fmt.Sprintf("coordinator.raft.dir %s has %s free, below coordinator.raft.disk.min-free %s: "+
			"the member will start with its replica paused until space is freed (free space, or lower coordinator.raft.disk.min-free)",
			o.Dir, byteSize(free), byteSize(uint64(o.DiskMinFree)))
	}
	return res, nil
}

// Formatted reports the cluster id of dir when it holds a formatted
// member (a cluster id and Raft state: what Bootstrap, Restore, a single
// voter's first start or a joined member leave), and ok false when it
// holds no cluster id. A damaged cluster-id file is an error.
func Formatted(dir string) (cid uint64, ok bool, err error) {
	if _, err := os.Stat(filepath.Join(dir, clusterIDFile)); errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if _, err := os.Stat(filepath.Join(dir, nodeHostDir)); err != nil {
		return 0, false, nil
	}
	cid, err = readClusterID(dir)
	if err != nil {
		return 0, false, err
	}
	return cid, true, nil
}

// BootstrapSettings is Bootstrap of the member a flattened configuration
// describes (OptionsFromSettings), its log lines dropped: the step an
// operator runs with `metaplane raft bootstrap`, for the tools that start
// a new multi-voter cluster themselves (metaplane demo, metaplane bench).
func BootstrapSettings(ctx context.Context, settings map[string]string) (BootstrapResult, error) {
	o, err := OptionsFromSettings(settings)
	if err != nil {
		return BootstrapResult{}, fmt.Errorf("%w: %v", core.ErrInvalidArgument, err)
	}
	o.Logf = func(string, ...any) {}
	return Bootstrap(ctx, o)
}

// RestoreResult says what Restore made.
type RestoreResult struct {
	ClusterID uint64
	NodeID    uint64
	Address   string
	Nodes     int
	Batches   int
	// AppliedIndex is the new cluster's applied index after the restore.
	AppliedIndex uint64
}

// Restore makes o.Dir (empty or missing) member o.NodeID of a new
// single-voter cluster (its own entry of o.Voters; the other voters are
// not part of it: add them with add-voter) holding nodes, imported in
// atomic batches with their versions, times and next sequential suffixes
// (a /coordinators/epoch node among them makes the new cluster's epochs
// continue above its value). nodes yields them in path order, parents
// first, and is read as the batches are written (a restore holds one
// batch, never the tree); an error it yields ends the restore with that
// error, the directory left as an incomplete cluster to remove. total,
// when known, is for progress, which is called after each batch. The
// member listens on a temporary loopback port while it restores.
// Errors: ErrInvalidArgument (a non-empty dir, a bad node), the import's,
// nodes'.
func Restore(ctx context.Context, o Options, nodes iter.Seq2[core.ImportNode, error], total int, progress func(done, total int)) (RestoreResult, error) {
	o = o.withDefaults()
	o.Join = false
	self, err := selfVoter(o)
	if err != nil {
		return RestoreResult{}, err
	}
	o.Voters = []Voter{self}
	if err := o.Validate(); err != nil {
		return RestoreResult{}, fmt.Errorf("%w: %v", core.ErrInvalidArgument, err)
	}
	if err := checkEmptyDir(o.Dir); err != nil {
		return RestoreResult{}, err
	}
	if o.ListenAddress, err = loopbackAddress(); err != nil {
		return RestoreResult{}, err
	}
	p := NewProvider(o)
	if err := p.Start(ctx, nil); err != nil {
		return RestoreResult{}, err
	}
	defer p.Close()
	c, err := p.Client(ctx, core.ClientOptions{Name: "raft-snapshot-restore"})
	if err != nil {
		return RestoreResult{}, err
	}
	res := RestoreResult{ClusterID: p.m.clusterID, NodeID: o.NodeID, Address: self.Address}
	const batchBytes = 2 << 20
	var batch []core.ImportNode
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := c.Import(ctx, batch, core.Fence{}); err != nil {
			if i := core.FailedOpIndex(err); i >= 0 && i < len(batch) {
				return fmt.Errorf("restore %s: %w", batch[i].Path, err)
			}
			return err
		}
		res.Batches++
		res.Nodes += len(batch)
		batch, size = batch[:0], 0
		if progress != nil {
			progress(res.Nodes, total)
		}
		return nil
	}
	for n, err := range nodes {
		if err != nil {
			return res, err
		}
		if len(batch) == core.MaxImportBatch || (len(batch) > 0 && size+len(n.Data) > batchBytes) {
			if err := flush(); err != nil {
				return res, err
			}
		}
		batch = append(batch, n)
		size += len(n.Data)
	}
	if err := flush(); err != nil {
		return res, err
	}
	if err := c.Close(); err != nil {
		return res, err
	}
	res.AppliedIndex = uint64(p.m.status(ctx).AppliedIndex)
	return res, nil
}

// ErrSurvivorBehind is wrapped by UnsafeRecover's refusal to rewrite a
// member that applied fewer entries than another survivor it was shown.
var ErrSurvivorBehind = errors.New("raft: another survivor is ahead")

// Survivor is what a stopped member's data directory holds, as
// UnsafeRecover reads it.
type Survivor struct {
	Dir       string
	NodeID    uint64
	Address   string
	ClusterID uint64
	// Term is the member's Raft term; AppliedIndex its state machine's
	// index (what a recovery on it keeps); CommitIndex the highest index
	// it knew committed; LastIndex the last entry of its log.
	Term         uint64
	AppliedIndex uint64
	CommitIndex  uint64
	LastIndex    uint64
}

// RecoverOptions say what UnsafeRecover compares and does.
type RecoverOptions struct {
	// Rewrite false reads and compares only (a dry run).
	Rewrite bool
	// SurvivorDirs are the data directories of the other survivors of the
	// cluster, stopped, on this host: each is read (not changed) and
	// compared with this member.
	SurvivorDirs []string
	// Survivors are the figures of other survivors read on their own
	// hosts (their dry runs), compared as they are: their ClusterID must
	// be this member's.
	Survivors []Survivor
	// ForceLagging, when this member applied fewer entries than another
	// survivor, must be that number of entries (the loss the refusal
	// names) for the rewrite to go ahead; 0 refuses such a member.
	ForceLagging uint64
}

// RecoverResult says what UnsafeRecover found and did.
type RecoverResult struct {
	// Survivor is this member's figures: it keeps every entry up to its
	// AppliedIndex; entries after it are discarded.
	Survivor
	// Removed are the members the new membership drops.
	Removed []Voter
	// Survivors are this member's figures, then those of every
	// RecoverOptions.SurvivorDirs entry and every RecoverOptions.Survivors
	// entry, in the order given.
	Survivors []Survivor
	// Pick is the survivor to recover on: the highest applied index, this
	// member on a tie. Behind is how many entries this member applied
	// fewer than Pick (0 when this member is Pick).
	Pick   Survivor
	Behind uint64
	// Rewritten is false for a dry run.
	Rewritten bool
}

// UnsafeRecover, on a survivor of a permanently lost majority, rewrites
// the membership of o.Dir's member o.NodeID to itself alone, so that it
// starts as a single-voter cluster holding every entry it had applied;
// entries after its applied index (in its log but not applied) are
// discarded, and so is anything the lost members had committed that this
// member had not received. It first reads every directory of
// ro.SurvivorDirs (each started for a moment on a loopback port, never
// rewritten), adds ro.Survivors, and refuses, before anything is changed, a directory that
// is not a stopped member of the same cluster. Then it starts the member
// on its Raft port to read its state, refuses when a leader answers (the
// quorum is not lost: use remove-voter), when the member is not a voter,
// or already the only voter, and, when rewriting, when another survivor
// applied more entries (ErrSurvivorBehind) unless ro.ForceLagging is that
// number; then it exports a snapshot of the state machine at its applied
// index and imports it with the new membership (Dragonboat's
// tools.ImportSnapshot). Without ro.Rewrite it stops after reading and
// comparing (a dry run). Errors: ErrDirInUse, ErrSurvivorBehind (with
// ErrInvalidArgument), ErrInvalidArgument, ErrUnavailable.
func UnsafeRecover(ctx context.Context, o Options, ro RecoverOptions) (RecoverResult, error) {
	o = o.withDefaults()
	o.Join = false
	var res RecoverResult
	if o.NodeID == 0 {
		return res, fmt.Errorf("%w: coordinator.raft.node.id: required", core.ErrInvalidArgument)
	}
	self, err := selfVoter(o)
	if err != nil {
		return res, err
	}
	res.NodeID, res.Address = o.NodeID, self.Address
	if _, err := os.Stat(filepath.Join(o.Dir, nodeHostDir)); err != nil {
		return res, fmt.Errorf("%w: %s holds no Raft state (no %s directory): is it this member's coordinator.raft.dir?", core.ErrInvalidArgument, o.Dir, nodeHostDir)
	}
	if err := checkNotInUse(o.Dir); err != nil {
		return res, err
	}
	cid, err := readClusterID(o.Dir)
	if err != nil {
		return res, err
	}
	res.ClusterID = cid
	// The other survivors first, one at a time, while this member is
	// stopped: two survivors running at once could elect a leader.
	var others []Survivor
	add := func(sv Survivor) error {
		if sv.ClusterID != cid {
			return fmt.Errorf("%w: survivor %s (member %d) belongs to cluster %d, not to this member's cluster %d", core.ErrInvalidArgument, sv.Dir, sv.NodeID, sv.ClusterID, cid)
		}
		for _, prev := range append([]Survivor{{Dir: o.Dir, NodeID: o.NodeID}}, others...) {
			if prev.NodeID == sv.NodeID {
				return fmt.Errorf("%w: survivor %s holds member %d, as %s does: give each survivor once, and not this member",
					core.ErrInvalidArgument, sv.Dir, sv.NodeID, prev.Dir)
			}
		}
		others = append(others, sv)
		return nil
	}
	for _, dir := range ro.SurvivorDirs {
		sv, err := readSurvivor(ctx, o, dir, cid)
		if err != nil {
			return res, err
		}
		if err := add(sv); err != nil {
			return res, err
		}
	}
	for _, sv := range ro.Survivors {
		if err := add(sv); err != nil {
			return res, err
		}
	}
	nhc := nodeHostConfig(o, cid, self.Address)
	if _, err := replicaInDir(nhc, o.NodeID); err != nil {
		return res, err
	}
	m, st, sv, err := openSurvivor(ctx, o, cid, self.Address)
	if err != nil {
		return res, err
	}
	closed := false
	defer func() {
		if !closed {
			m.close()
		}
	}()
	res.Survivor = sv
	res.Survivors = append([]Survivor{sv}, others...)
	res.Pick = sv
	for _, x := range others {
		if x.AppliedIndex > res.Pick.AppliedIndex {
			res.Pick = x
		}
	}
	res.Behind = res.Pick.AppliedIndex - sv.AppliedIndex
	mv := m.membership(ctx, false)
	if _, ok := mv.voters[o.NodeID]; !ok {
		return res, fmt.Errorf("%w: member %d is not a voter of its membership (non-voting or removed): recover on a voter", core.ErrInvalidArgument, o.NodeID)
	}
	for _, g := range []map[uint64]string{mv.voters, mv.nonVoting, mv.witnesses} {
		for id, addr := range g {
			if id != o.NodeID {
				res.Removed = append(res.Removed, Voter{ID: id, Address: addr})
			}
		}
	}
	sort.Slice(res.Removed, func(i, j int) bool { return res.Removed[i].ID < res.Removed[j].ID })
	if st.LeaderID != "" {
		if len(res.Removed) == 0 {
			return res, fmt.Errorf("%w: member %d is already the only voter: nothing to recover", core.ErrInvalidArgument, o.NodeID)
		}
		return res, fmt.Errorf("%w: member %s leads at term %d: the quorum is not lost; remove lost members with remove-voter instead", core.ErrInvalidArgument, st.LeaderID, st.Epoch)
	}
	if len(res.Removed) == 0 {
		return res, fmt.Errorf("%w: member %d is already the only voter: nothing to recover", core.ErrInvalidArgument, o.NodeID)
	}
	if !ro.Rewrite {
		return res, nil
	}
	if err := checkBehind(res, ro.ForceLagging); err != nil {
		return res, err
	}
	exportDir := filepath.Join(o.Dir, "unsafe-recover.snapshot")
	if err := os.RemoveAll(exportDir); err != nil {
		return res, err
	}
	if err := os.MkdirAll(exportDir, 0o750); err != nil {
		return res, err
	}
	defer os.RemoveAll(exportDir)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	idx, err := m.nh.SyncRequestSnapshot(sctx, shardID, dragonboat.SnapshotOption{Exported: true, ExportPath: exportDir})
	cancel()
	if err != nil {
		return res, fmt.Errorf("%w: raft: export a snapshot of member %d: %v (nothing was changed)", core.ErrUnavailable, o.NodeID, err)
	}
	if idx != res.AppliedIndex {
		res.AppliedIndex = idx
	}
	m.close()
	closed = true
	ents, err := os.ReadDir(exportDir)
	if err != nil || len(ents) != 1 || !ents[0].IsDir() {
		return res, fmt.Errorf("%w: raft: the exported snapshot in %s is not one directory (nothing was changed)", core.ErrUnavailable, exportDir)
	}
	members := map[uint64]string{o.NodeID: self.Address}
	if err := tools.ImportSnapshot(nhc, filepath.Join(exportDir, ents[0].Name()), members, o.NodeID); err != nil {
		return res, fmt.Errorf("%w: raft: import the snapshot with member %d alone: %v", core.ErrUnavailable, o.NodeID, err)
	}
	if err := os.Remove(filepath.Join(o.Dir, nonVotingFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return res, err
	}
	res.Rewritten = true
	return res, nil
}

// checkBehind refuses a rewrite of a member behind another survivor
// unless force names exactly how far behind it is.
func checkBehind(res RecoverResult, force uint64) error {
	if res.Behind == 0 {
		if force != 0 {
			return fmt.Errorf("%w: --force-lagging %d, but member %d is not behind any survivor given (applied index %d): run without --force-lagging",
				core.ErrInvalidArgument, force, res.NodeID, res.AppliedIndex)
		}
		return nil
	}
	figures := make([]string, len(res.Survivors))
	for i, sv := range res.Survivors {
		figures[i] = fmt.Sprintf("member %d (%s): term %d, applied index %d, commit index %d, last log index %d",
			sv.NodeID, sv.Dir, sv.Term, sv.AppliedIndex, sv.CommitIndex, sv.LastIndex)
	}
	if force == res.Behind {
		return nil
	}
	what := "refused"
	if force != 0 {
		what = fmt.Sprintf("refused (--force-lagging %d does not name this loss)", force)
	}
	return fmt.Errorf("%w: %w: member %d applied %d entries fewer than member %d: recovering on it would lose them for good; %s. "+
		"Run unsafe-recover on member %d (%s) instead, or pass --force-lagging %d to accept the loss. Survivors: %s",
		core.ErrInvalidArgument, ErrSurvivorBehind, res.NodeID, res.Behind, res.Pick.NodeID, what,
		res.Pick.NodeID, res.Pick.Dir, res.Behind, strings.Join(figures, "; "))
}

// openSurvivor starts the member of o (its directory holding cluster
// cid, its Raft address addr) and reads its figures once it has heard
// from a leader or applied what it knew committed, giving a live quorum
// two election timeouts to make itself known. The member is left
// running.
func openSurvivor(ctx context.Context, o Options, cid uint64, addr string) (*member, core.Status, Survivor, error) {
	sv := Survivor{Dir: o.Dir, NodeID: o.NodeID, Address: addr, ClusterID: cid}
	m, err := startMember(ctx, o)
	if err != nil {
		return nil, core.Status{}, sv, err
	}
	deadline := time.Now().Add(2 * o.ElectionTimeout)
	var st core.Status
	for {
		st = m.status(ctx)
		if st.LeaderID != "" || (time.Now().After(deadline) && st.AppliedIndex >= st.CommitIndex) {
			break
		}
		if time.Now().After(deadline.Add(10 * time.Second)) {
			break
		}
		select {
		case <-ctx.Done():
			m.close()
			return nil, st, sv, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	sv.Term, sv.AppliedIndex, sv.CommitIndex = uint64(st.Epoch), uint64(st.AppliedIndex), uint64(st.CommitIndex)
	sv.LastIndex = sv.CommitIndex
	if lr, err := m.nh.GetLogReader(shardID); err == nil {
		if _, last := lr.GetRange(); last > sv.LastIndex {
			sv.LastIndex = last
		}
	}
	return m, st, sv, nil
}

// readSurvivor reads the figures of the stopped member in dir, a survivor
// of cluster cid other than o's member: its Raft address from
// Dragonboat's record in the directory, its id from its log, its state
// from a start on a loopback port (it is not reached from outside; a
// leader it hears from is a refusal: the quorum is not lost).
func readSurvivor(ctx context.Context, o Options, dir string, cid uint64) (Survivor, error) {
	if _, err := os.Stat(filepath.Join(dir, nodeHostDir)); err != nil {
		return Survivor{}, fmt.Errorf("%w: --survivor-dir %s holds no Raft state (no %s directory)", core.ErrInvalidArgument, dir, nodeHostDir)
	}
	if err := checkNotInUse(dir); err != nil {
		return Survivor{}, err
	}
	other, err := readClusterID(dir)
	if err != nil {
		return Survivor{}, err
	}
	if other != cid {
		return Survivor{}, fmt.Errorf("%w: survivor %s belongs to cluster %d, not to this member's cluster %d", core.ErrInvalidArgument, dir, other, cid)
	}
	addr, err := ownerAddress(dir)
	if err != nil {
		return Survivor{}, err
	}
	so := o
	so.Dir = dir
	if so.ListenAddress, err = loopbackAddress(); err != nil {
		return Survivor{}, err
	}
	id, err := replicaInDir(nodeHostConfig(so, cid, addr), 0)
	if err != nil {
		return Survivor{}, err
	}
	so.NodeID, so.Voters, so.ClusterID = id, []Voter{{ID: id, Address: addr}}, cid
	m, st, sv, err := openSurvivor(ctx, so, cid, addr)
	if err != nil {
		return sv, err
	}
	m.close()
	if st.LeaderID != "" {
		return sv, fmt.Errorf("%w: member %s leads at term %d (heard by the survivor in %s): the quorum is not lost; remove lost members with remove-voter instead",
			core.ErrInvalidArgument, st.LeaderID, st.Epoch, dir)
	}
	return sv, nil
}

// replicaInDir opens the NodeHost of nhc (not listening where a member
// would be reached: nhc's ListenAddress) and returns the id of the
// replica its log holds: want, or, when want is 0, the one replica of
// metaplane's shard there.
func replicaInDir(nhc dbconfig.NodeHostConfig, want uint64) (uint64, error) {
	if want != 0 {
		if err := checkOwner(filepath.Dir(nhc.NodeHostDir), want, nhc.RaftAddress); err != nil {
			return 0, err
		}
	}
	quietDragonboat()
	nh, err := dragonboat.NewNodeHost(nhc)
	if err != nil {
		return 0, fmt.Errorf("%w: raft: open %s: %v", core.ErrUnavailable, filepath.Dir(nhc.NodeHostDir), err)
	}
	info := nh.GetNodeHostInfo(dragonboat.NodeHostInfoOption{})
	nh.Close()
	var ids []uint64
	if info != nil {
		for _, ni := range info.LogInfo {
			if ni.ShardID == shardID {
				ids = append(ids, ni.ReplicaID)
			}
		}
	}
	dir := filepath.Dir(nhc.NodeHostDir)
	if want != 0 {
		for _, id := range ids {
			if id == want {
				return id, nil
			}
		}
		return 0, fmt.Errorf("%w: %s holds no replica of member %d (check coordinator.raft.node.id)", core.ErrInvalidArgument, dir, want)
	}
	if len(ids) != 1 {
		return 0, fmt.Errorf("%w: %s holds %d replicas of the metadata shard, want one", core.ErrInvalidArgument, dir, len(ids))
	}
	return ids[0], nil
}

// ownerAddress is the Raft address dir's NodeHost was created with, as
// Dragonboat records it (nodehost/dragonboat.ds: 8 bytes of checksum,
// then a RaftDataStatus).
func ownerAddress(dir string) (string, error) {
	p := filepath.Join(dir, nodeHostDir, "dragonboat.ds")
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("%w: %s holds no Raft address record: %v", core.ErrInvalidArgument, dir, err)
	}
	var s raftpb.RaftDataStatus
	if len(b) < 8 || s.Unmarshal(b[8:]) != nil || s.Address == "" {
		return "", fmt.Errorf("%w: %s is damaged", core.ErrInvalidArgument, p)
	}
	return s.Address, nil
}

// readClusterID reads the cluster id a bootstrap wrote in dir.
func readClusterID(dir string) (uint64, error) {
	p := filepath.Join(dir, clusterIDFile)
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("%w: %s holds no cluster id (%v): is it a member's coordinator.raft.dir?", core.ErrInvalidArgument, dir, err)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s is damaged: %v", core.ErrInvalidArgument, p, err)
	}
	return id, nil
}
