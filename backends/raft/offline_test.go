package raft

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// TestUnsafeRecover: a three-voter cluster loses two members for good
// (stopped, their directories deleted); UnsafeRecover refuses while the
// quorum is whole, then rewrites the survivor's membership, after which it
// starts alone as leader and holds every acknowledged write.
func TestUnsafeRecover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-voter cluster")
	}
	c := startCluster(t, 3, nil)
	l := c.waitLeader()
	cl := c.client(l)
	// One bound for the whole test, which restarts members several
	// times: generous on a busy machine.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var acked []string
	for i := 0; i < 20; i++ {
		p := fmt.Sprintf("/w/n%02d", i)
		if _, _, err := core.Create(ctx, cl, p, []byte(p), core.CreateOptions{MakeParents: true}); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, p)
	}
	if _, err := core.Set(ctx, cl, "/w/n00", []byte("v2"), core.AnyVersion, core.Fence{}); err != nil {
		t.Fatal(err)
	}
	// The survivor: a follower (the harder case: it may lag).
	s := (l + 1) % 3
	// Wait until the survivor has applied the last write.
	want := c.mustStatus(l).CommitIndex
	waitApplied(t, c.members[s], want)

	// With the quorum whole, a stopped member is refused: a leader
	// answers. That member is then lost for good.
	x := (l + 2) % 3
	c.stop(x)
	if _, err := UnsafeRecover(ctx, c.options(x), RecoverOptions{}); err == nil || !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), "not lost") {
		t.Fatalf("UnsafeRecover with a live quorum: %v, want a refusal", err)
	}
	os.RemoveAll(c.dirs[x])
	// The leader is lost too: the survivor's proposals fail, and count.
	sc := c.client(s)
	c.stop(l)
	os.RemoveAll(c.dirs[l])
	if _, _, err := core.Create(ctx, sc, "/w/never", nil, core.CreateOptions{}); !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("a write without a quorum: %v, want ErrUnavailable", err)
	}
	if st := c.mustStatus(s); st.ProposalsFailed < 1 {
		t.Errorf("ProposalsFailed %d after a write without a quorum, want at least 1", st.ProposalsFailed)
	}
	c.stop(s)
	dry, err := UnsafeRecover(ctx, c.options(s), RecoverOptions{})
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if dry.Rewritten || len(dry.Removed) != 2 || dry.AppliedIndex < uint64(want) {
		t.Fatalf("dry run: %+v, want 2 removed, applied >= %d, not rewritten", dry, want)
	}
	res, err := UnsafeRecover(ctx, c.options(s), RecoverOptions{Rewrite: true})
	if err != nil {
		t.Fatalf("UnsafeRecover: %v", err)
	}
	if !res.Rewritten || res.AppliedIndex < uint64(want) {
		t.Fatalf("UnsafeRecover: %+v", res)
	}
	if err := c.start(s); err != nil {
		t.Fatal(err)
	}
	if got := c.waitLeader(); got != s {
		t.Fatalf("leader %d, want the survivor %d", got, s)
	}
	st := c.mustStatus(s)
	if len(st.Members) != 1 {
		t.Fatalf("members after recovery: %+v, want the survivor alone", st.Members)
	}
	rc := c.client(s)
	for _, p := range acked {
		n, err := core.Get(ctx, rc, p)
		if err != nil {
			t.Fatalf("acknowledged %s lost: %v", p, err)
		}
		if p == "/w/n00" && (string(n.Data) != "v2" || n.Stat.Version != 1) {
			t.Fatalf("%s: %q version %d, want v2 version 1", p, n.Data, n.Stat.Version)
		}
	}
	// It commits new writes alone.
	if _, _, err := core.Create(ctx, rc, "/w/after", nil, core.CreateOptions{}); err != nil {
		t.Fatalf("write after recovery: %v", err)
	}
	// A second recovery has nothing to do.
	c.stop(s)
	if _, err := UnsafeRecover(ctx, c.options(s), RecoverOptions{}); err == nil || !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("UnsafeRecover of a single voter: %v, want a refusal", err)
	}
}

// TestUnsafeRecoverRefusesALaggingSurvivor: of a three-voter cluster,
// member x stops early (it lags: the two others commit more writes), then
// the leader is lost for good. Given each other's directories, the dry run
// on either survivor reports both and picks the one ahead; the rewrite on
// the lagging one is refused, naming both survivors' figures, and with a
// --force-lagging that is not the loss; on the survivor ahead it goes
// through, and that member alone holds every write.
func TestUnsafeRecoverRefusesALaggingSurvivor(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-voter cluster")
	}
	c := startCluster(t, 3, nil)
	l := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := c.client(l)
	write := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			p := fmt.Sprintf("/w/n%02d", i)
			if _, _, err := core.Create(ctx, cl, p, nil, core.CreateOptions{MakeParents: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(0, 5)
	x, s := (l+1)%3, (l+2)%3
	waitApplied(t, c.members[x], c.mustStatus(l).CommitIndex)
	c.stop(x)
	write(5, 15)
	want := c.mustStatus(l).CommitIndex
	waitApplied(t, c.members[s], want)
	c.stop(l)
	os.RemoveAll(c.dirs[l])
	c.stop(s)

	// The dry run on the lagging member: both survivors, the other picked.
	dry, err := UnsafeRecover(ctx, c.options(x), RecoverOptions{SurvivorDirs: []string{c.dirs[s]}})
	if err != nil {
		t.Fatalf("dry run on the lagging member: %v", err)
	}
	if len(dry.Survivors) != 2 || dry.Survivors[0].NodeID != uint64(x+1) || dry.Survivors[1].NodeID != uint64(s+1) ||
		dry.Survivors[1].Address != c.voters[s].Address || dry.Survivors[1].AppliedIndex < uint64(want) {
		t.Fatalf("dry run survivors: %+v, want member %d then member %d (applied >= %d)", dry.Survivors, x+1, s+1, want)
	}
	behind := dry.Survivors[1].AppliedIndex - dry.Survivors[0].AppliedIndex
	if dry.Pick.NodeID != uint64(s+1) || behind < 10 || dry.Behind != behind {
		t.Fatalf("dry run: pick %d, behind %d (applied %d and %d), want member %d picked, at least 10 behind",
			dry.Pick.NodeID, dry.Behind, dry.Survivors[0].AppliedIndex, dry.Survivors[1].AppliedIndex, s+1)
	}
	// The rewrite on it is refused, with both survivors' figures, also
	// with a --force-lagging that is not the loss.
	for _, force := range []uint64{0, behind + 1} {
		_, err = UnsafeRecover(ctx, c.options(x), RecoverOptions{Rewrite: true, SurvivorDirs: []string{c.dirs[s]}, ForceLagging: force})
		if !errors.Is(err, ErrSurvivorBehind) || !errors.Is(err, core.ErrInvalidArgument) {
			t.Fatalf("rewrite of the lagging member (--force-lagging %d): %v, want ErrSurvivorBehind", force, err)
		}
		for _, sv := range dry.Survivors {
			if f := fmt.Sprintf("member %d (%s): term %d, applied index %d", sv.NodeID, sv.Dir, sv.Term, sv.AppliedIndex); !strings.Contains(err.Error(), f) {
				t.Errorf("the refusal does not give %q: %v", f, err)
			}
		}
		if f := fmt.Sprintf("--force-lagging %d to accept", behind); !strings.Contains(err.Error(), f) {
			t.Errorf("the refusal does not name the loss (%q): %v", f, err)
		}
	}
	// The other survivor's figures, read on its own host (its dry run),
	// count the same.
	if _, err := UnsafeRecover(ctx, c.options(x), RecoverOptions{Rewrite: true, Survivors: dry.Survivors[1:]}); !errors.Is(err, ErrSurvivorBehind) {
		t.Fatalf("rewrite of the lagging member given the other's figures: %v, want ErrSurvivorBehind", err)
	}
	// A directory given twice, and one of another cluster, are refused.
	if _, err := UnsafeRecover(ctx, c.options(x), RecoverOptions{SurvivorDirs: []string{c.dirs[x]}}); !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), "give each survivor once") {
		t.Fatalf("its own directory as a survivor: %v, want a refusal", err)
	}
	single := filepath.Join(t.TempDir(), "single")
	p := NewProvider(testOptions(single, 1, newVoters(t, 1)))
	if err := p.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if _, err := UnsafeRecover(ctx, c.options(x), RecoverOptions{SurvivorDirs: []string{single}}); !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), "belongs to cluster") {
		t.Fatalf("another cluster's directory as a survivor: %v, want a refusal", err)
	}

	// On the survivor ahead it goes through.
	res, err := UnsafeRecover(ctx, c.options(s), RecoverOptions{Rewrite: true, SurvivorDirs: []string{c.dirs[x]}})
	if err != nil {
		t.Fatalf("UnsafeRecover on the survivor ahead: %v", err)
	}
	if !res.Rewritten || res.Behind != 0 || res.Pick.NodeID != uint64(s+1) || len(res.Survivors) != 2 {
		t.Fatalf("UnsafeRecover on the survivor ahead: %+v", res)
	}
	if err := c.start(s); err != nil {
		t.Fatal(err)
	}
	if got := c.waitLeader(); got != s {
		t.Fatalf("leader %d, want the survivor %d", got, s)
	}
	rc := c.client(s)
	for i := 0; i < 15; i++ {
		if _, err := core.Get(ctx, rc, fmt.Sprintf("/w/n%02d", i)); err != nil {
			t.Errorf("/w/n%02d lost by the recovery: %v", i, err)
		}
	}
}

// TestRestoreAndBootstrap: Restore refuses a non-empty dir, then makes a
// single-voter cluster from nodes with their versions and times, whose
// next leader's epoch is above the tree's /coordinators/epoch; Bootstrap formats an empty dir
// and refuses a non-empty one and an address clash.
func TestRestoreAndBootstrap(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Raft members")
	}
	// One bound for the whole test, which restarts members several
	// times: generous on a busy machine.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "restored")
	voters := newVoters(t, 1)
	o := testOptions(dir, 1, voters)
	nodes := []core.ImportNode{
		{Path: "/a", Data: []byte("a"), Version: 7, CreateTime: 1000, ModifyTime: 2000},
		{Path: "/coordinators"}, {Path: "/coordinators/epoch", Data: []byte("40")},
		{Path: "/a/b", Data: []byte("b"), Version: 3, CreateTime: 1500, ModifyTime: 2500, NextSequence: 12},
	}
	os.MkdirAll(dir, 0o750)
	os.WriteFile(filepath.Join(dir, "x"), nil, 0o640)
	if _, err := Restore(ctx, o, importSeq(nodes), len(nodes), nil); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("Restore into a non-empty dir: %v", err)
	}
	os.Remove(filepath.Join(dir, "x"))
	res, err := Restore(ctx, o, importSeq(nodes), len(nodes), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Nodes != 4 || res.Batches != 1 {
		t.Fatalf("Restore: %+v", res)
	}
	p := NewProvider(o)
	if err := p.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cl, err := p.Client(ctx, core.ClientOptions{Name: "check"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	n, err := core.Get(ctx, cl, "/a/b")
	if err != nil || string(n.Data) != "b" || n.Stat.Version != 3 || n.Stat.CreateTime != 1500 || n.Stat.ModifyTime != 2500 {
		t.Fatalf("/a/b after restore: %+v %v", n, err)
	}
	seq, _, err := core.Create(ctx, cl, "/a/b/s-", nil, core.CreateOptions{Mode: core.PersistentSequential})
	if err != nil || seq != "/a/b/s-0000000012" {
		t.Fatalf("sequential after restore: %q %v, want suffix 12", seq, err)
	}
	lead, err := cl.Campaign(ctx, core.Candidate{ID: "c1", Address: "CLIENT://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if lead.Epoch() <= 40 {
		t.Fatalf("first epoch after restore %d, want above the source's 40", lead.Epoch())
	}

	// Bootstrap.
	bdir := filepath.Join(t.TempDir(), "boot")
	three := newVoters(t, 3)
	br, err := Bootstrap(context.Background(), testOptions(bdir, 2, three))
	if err != nil {
		t.Fatal(err)
	}
	if br.ClusterID != deriveClusterID(three) {
		t.Fatalf("cluster id %d, want %d", br.ClusterID, deriveClusterID(three))
	}
	if _, err := Bootstrap(context.Background(), testOptions(bdir, 2, three)); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("Bootstrap of a formatted dir: %v", err)
	}
	// The three members, each bootstrapped, start from their directories
	// as one cluster.
	bc := &cluster{t: t, voters: three, members: make([]*Provider, 3)}
	t.Cleanup(bc.stopAll)
	bc.dirs = []string{filepath.Join(t.TempDir(), "boot1"), bdir, filepath.Join(t.TempDir(), "boot3")}
	for _, i := range []int{0, 2} {
		if _, err := Bootstrap(context.Background(), bc.options(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := bc.startParallel(0, 1, 2); err != nil {
		t.Fatalf("start the bootstrapped members: %v", err)
	}
	bc.waitLeader()
	if _, _, err := core.Create(ctx, bc.client(bc.waitLeader()), "/booted", nil, core.CreateOptions{}); err != nil {
		t.Fatalf("a write on the bootstrapped cluster: %v", err)
	}
	clash := append([]Voter(nil), three...)
	clash[2].Address = clash[0].Address
	if _, err := Bootstrap(context.Background(), testOptions(filepath.Join(t.TempDir(), "b2"), 1, clash)); err == nil {
		t.Fatal("Bootstrap with an address clash: no error")
	}
}

func (c *cluster) mustStatus(i int) core.Status {
	c.t.Helper()
	st, err := c.members[i].Status()
	if err != nil {
		c.t.Fatal(err)
	}
	return st
}

func waitApplied(t *testing.T, p *Provider, index int64) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		p.m.mu.Lock()
		ch := p.m.applyC
		p.m.mu.Unlock()
		st, err := p.Status()
		if err == nil && st.AppliedIndex >= index {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("applied %d, want %d", st.AppliedIndex, index)
		}
	}
}

// TestUnformattedDirRefused: a member of a multi-voter cluster does not
// format its directory itself: on an empty directory, and on one an
// interrupted bootstrap left with a cluster id and no replica, Start
// refuses with a message naming `metaplane raft bootstrap`, writing
// nothing into the empty one. A joining member and a single voter are not
// refused; the single voter formats its empty directory on first start.
func TestUnformattedDirRefused(t *testing.T) {
	three := newVoters(t, 3)
	dir := filepath.Join(t.TempDir(), "m1")
	err := NewProvider(testOptions(dir, 1, three)).Start(context.Background(), nil)
	if !errors.Is(err, ErrNotBootstrapped) || !strings.Contains(err.Error(), "metaplane raft bootstrap --data-dir "+dir) {
		t.Fatalf("start on an empty dir: %v, want ErrNotBootstrapped naming metaplane raft bootstrap", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused start created %s (%v)", dir, err)
	}
	half := t.TempDir()
	if err := os.WriteFile(filepath.Join(half, clusterIDFile), []byte(fmt.Sprintf("%d\n", deriveClusterID(three))), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := NewProvider(testOptions(half, 2, three)).Start(context.Background(), nil); !errors.Is(err, ErrNotBootstrapped) {
		t.Fatalf("start on a half-bootstrapped dir: %v, want ErrNotBootstrapped", err)
	}
	join := testOptions(filepath.Join(t.TempDir(), "j"), 4, append(append([]Voter(nil), three...), Voter{ID: 4, Address: "127.0.0.1:1"}))
	join.Join = true
	if err := checkFormatted(join.withDefaults()); err != nil {
		t.Fatalf("a joining member is refused: %v", err)
	}
	single := filepath.Join(t.TempDir(), "single")
	p := NewProvider(testOptions(single, 1, newVoters(t, 1)))
	if err := p.Start(context.Background(), nil); err != nil {
		t.Fatalf("a single voter on an empty dir: %v", err)
	}
	defer p.Close()
	if _, err := readClusterID(single); err != nil {
		t.Fatalf("the single voter did not format its dir: %v", err)
	}
}

// importSeq yields nodes, in order, without an error.
func importSeq(nodes []core.ImportNode) iter.Seq2[core.ImportNode, error] {
	return func(yield func(core.ImportNode, error) bool) {
		for _, n := range nodes {
			if !yield(n, nil) {
				return
			}
		}
	}
}

// TestRestoreStreamsAndStopsOnItsSourcesError: Restore writes its nodes
// in batches as it reads them (a source of more nodes than one batch
// holds) and ends with the error its source yields, naming it, after the
// batches before it were written.
func TestRestoreStreamsAndStopsOnItsSourcesError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := testOptions(filepath.Join(t.TempDir(), "restored"), 1, newVoters(t, 1))
	bad := errors.New("the file changed after it was checked")
	const n = core.MaxImportBatch + 10
	read := 0
	nodes := func(yield func(core.ImportNode, error) bool) {
		if !yield(core.ImportNode{Path: "/t"}, nil) {
			return
		}
		for i := 0; i < n; i++ {
			read++
			if !yield(core.ImportNode{Path: fmt.Sprintf("/t/n%05d", i), Data: []byte("x")}, nil) {
				return
			}
		}
		yield(core.ImportNode{}, bad)
	}
	var progress []int
	res, err := Restore(ctx, o, nodes, n+1, func(done, _ int) { progress = append(progress, done) })
	if !errors.Is(err, bad) {
		t.Fatalf("Restore: %v, want the source's error", err)
	}
	if read != n || res.Batches != 1 || res.Nodes != core.MaxImportBatch || len(progress) != 1 || progress[0] != core.MaxImportBatch {
		t.Fatalf("read %d of %d, result %+v, progress %v: want one full batch written before the error", read, n, res, progress)
	}
}

// TestStartRefusesAnotherAddress: a directory records the member id and
// Raft address it was formatted for (bootstrap writes it); a start under
// another address, or another id, is refused before Dragonboat opens the
// directory, naming both addresses and the key to fix; so is a start of
// an older directory without the record (checked against Dragonboat's);
// the right address starts.
func TestStartRefusesAnotherAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Raft members")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	three := newVoters(t, 3)
	dir := filepath.Join(t.TempDir(), "m2")
	if _, err := Bootstrap(ctx, testOptions(dir, 2, three)); err != nil {
		t.Fatal(err)
	}
	rec, ok, err := readMemberRecord(dir)
	if err != nil || !ok || rec.NodeID != 2 || rec.Address != three[1].Address {
		t.Fatalf("record after bootstrap: %+v %v %v, want member 2 at %s", rec, ok, err, three[1].Address)
	}
	moved := append([]Voter(nil), three...)
	moved[1].Address = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	for _, older := range []bool{false, true} {
		if older {
			if err := os.Remove(filepath.Join(dir, memberFile)); err != nil {
				t.Fatal(err)
			}
		}
		err := NewProvider(testOptions(dir, 2, moved)).Start(ctx, nil)
		if !errors.Is(err, ErrWrongAddress) {
			t.Fatalf("start under another address (older directory %v): %v, want ErrWrongAddress", older, err)
		}
		for _, want := range []string{three[1].Address, moved[1].Address, "coordinator.raft.voters", "2@" + three[1].Address} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the refusal (older directory %v) does not name %q: %v", older, want, err)
			}
		}
		if strings.Contains(err.Error(), "not the owner") {
			t.Errorf("the refusal is Dragonboat's: %v", err)
		}
	}
	// Another id on the directory of member 2 is refused too.
	if err := writeMemberRecord(dir, 2, three[1].Address); err != nil {
		t.Fatal(err)
	}
	if err := NewProvider(testOptions(dir, 3, three)).Start(ctx, nil); !errors.Is(err, ErrWrongAddress) || !strings.Contains(err.Error(), "belongs to member 2") {
		t.Fatalf("start under another id: %v, want ErrWrongAddress naming member 2", err)
	}
	// The offline tools refuse the same way.
	if _, err := UnsafeRecover(ctx, testOptions(dir, 2, moved), RecoverOptions{}); !errors.Is(err, ErrWrongAddress) {
		t.Fatalf("unsafe-recover under another address: %v, want ErrWrongAddress", err)
	}
	// A single voter restored under one address and started under another.
	one := newVoters(t, 1)
	rdir := filepath.Join(t.TempDir(), "restored")
	if _, err := Restore(ctx, testOptions(rdir, 1, one), importSeq([]core.ImportNode{{Path: "/a"}}), 1, nil); err != nil {
		t.Fatal(err)
	}
	other := []Voter{{ID: 1, Address: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))}}
	if err := NewProvider(testOptions(rdir, 1, other)).Start(ctx, nil); !errors.Is(err, ErrWrongAddress) || !strings.Contains(err.Error(), one[0].Address) {
		t.Fatalf("start of a restored directory under another address: %v, want ErrWrongAddress naming %s", err, one[0].Address)
	}
	p := NewProvider(testOptions(rdir, 1, one))
	if err := p.Start(ctx, nil); err != nil {
		t.Fatalf("start of the restored directory under its address: %v", err)
	}
	p.Close()
}
