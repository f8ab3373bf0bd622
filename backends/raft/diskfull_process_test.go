package raft

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// tmpfsVoters starts three voter processes, voter 1 with its
// coordinator.raft.dir on a new tmpfs of size bytes and
// coordinator.raft.disk.min-free minFree; it returns the mount point, the
// voters and a client of each.
func tmpfsVoters(t *testing.T, size int64, minFree string) (string, *voterProcs, []core.MetadataBackend) {
	t.Helper()
	mnt := testutil.MountTmpfs(t, size)
	cfgs := voterConfigs(t, 3)
	cfgs[0]["coordinator.raft.dir"] = filepath.Join(mnt, "m1")
	cfgs[0]["coordinator.raft.disk.min-free"] = minFree
	v := startProcsWith(t, cfgs)
	return mnt, v, []core.MetadataBackend{v.client(0), v.client(1), v.client(2)}
}

// TestProcessDiskFullTmpfs: voter 1 of three plugin processes keeps its
// coordinator.raft.dir on a small real tmpfs. Another process fills it
// below coordinator.raft.disk.min-free: the voter's process stays up (no
// restart), says why it is paused, refuses its calls naming the full disk,
// while the other two keep serving; once the filler is removed it resumes
// and catches up by itself, with nothing lost or duplicated.
func TestProcessDiskFullTmpfs(t *testing.T) {
	const reserve = 16 << 20
	mnt, v, clients := tmpfsVoters(t, 96<<20, "16mb")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var l int
	testutil.WaitFor(t, 20*time.Second, "a leader", func() bool { l = v.leader(clients); return l >= 0 })
	if _, _, err := core.Create(ctx, clients[l], "/before", []byte("b"), core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("tmpfs free with voter 1 running: %d bytes", testutil.FreeBytes(t, mnt))

	filler := testutil.FillDisk(t, mnt, reserve/2)
	statusOf := func(i int) (core.Status, error) {
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		defer scancel()
		return clients[i].Status(sctx)
	}
	testutil.WaitFor(t, 30*time.Second, "voter 1 paused, naming its full disk", func() bool {
		st, err := statusOf(0)
		return err == nil && strings.Contains(st.Details["diskFull"], "disk full on voter 1") && st.Role != core.RoleLeader
	})
	var nl int
	testutil.WaitFor(t, 20*time.Second, "voter 2 or 3 leading", func() bool { nl = v.leader(clients[1:]); return nl >= 0 })
	nl++
	const during = 30
	for i := 0; i < during; i++ {
		if _, _, err := core.Create(ctx, clients[nl], fmt.Sprintf("/during/%02d", i), []byte("d"), core.CreateOptions{MakeParents: true}); err != nil {
			t.Fatalf("the two voters with space refused write %d: %v", i, err)
		}
	}
	_, _, err := core.Create(ctx, clients[0], "/refused", nil, core.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "disk full on voter 1") {
		t.Fatalf("write through the full voter: %v, want a refusal naming the full disk", err)
	}
	if n := v.plugins[0].Restarts(); n != 0 {
		t.Fatalf("the full voter's plugin restarted %d times", n)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 60*time.Second, "voter 1 resumed and caught up", func() bool {
		st, err := statusOf(0)
		if err != nil || st.Details["diskFull"] != "" {
			return false
		}
		res, err := clients[0].GetMany(ctx, []string{"/before", fmt.Sprintf("/during/%02d", during-1)}, core.ReadOptions{Stale: true})
		return err == nil && res[0].Err == nil && res[1].Err == nil
	})
	kids, _, err := clients[0].Children(ctx, "/during", core.ReadOptions{})
	if err != nil || len(kids) != during {
		t.Fatalf("children of /during on the resumed voter: %d, %v; want %d", len(kids), err, during)
	}
	if _, err := core.Get(ctx, clients[0], "/refused"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("the refused write exists: %v", err)
	}
	if n := v.plugins[0].Restarts(); n != 0 {
		t.Fatalf("the full voter's plugin restarted %d times", n)
	}
}

// TestProcessDiskFilledFasterThanTheGuard: voter 1's tmpfs is left with
// too little space for the writes that follow, and its reserve is set to
// one byte, so the guard does not pause it first: its Raft log write fails
// with ENOSPC and Dragonboat panics (the plugin process exits), and the
// restarted plugin cannot open its log on the full disk and waits for
// space (or, when it opened it and filled the disk again before its guard
// paused it, is left with a log write that never returns and ends its
// process once space is back: diskGuard.stuckWrite). The other two keep
// serving; once the filler is removed voter 1 starts by itself and holds
// exactly what the quorum committed.
func TestProcessDiskFilledFasterThanTheGuard(t *testing.T) {
	mnt, v, clients := tmpfsVoters(t, 64<<20, "1b")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	testutil.WaitFor(t, 20*time.Second, "a leader", func() bool { return v.leader(clients) >= 0 })
	pid := v.plugins[0].Pid()
	filler := testutil.FillDisk(t, mnt, 3<<20)
	big := make([]byte, 200<<10)
	const n = 60
	for i := 0; i < n; i++ {
		// Voter 1 may have led: its end costs an election, and a write
		// caught by it has an unknown outcome; it is repeated (a repetition
		// finding the node applied the first).
		for try := 0; ; try++ {
			_, _, err := core.Create(ctx, clients[1+(i+try)%2], fmt.Sprintf("/w/%02d", i), big, core.CreateOptions{MakeParents: true})
			if err == nil || (try > 0 && errors.Is(err, core.ErrNodeExists)) {
				break
			}
			if !errors.Is(err, core.ErrUnavailable) || try == 5 {
				t.Fatalf("the two voters with space refused write %d: %v", i, err)
			}
		}
	}
	testutil.WaitFor(t, 30*time.Second, "voter 1's process to end on ENOSPC", func() bool {
		return v.plugins[0].Pid() != pid
	})
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	var last string
	defer func() {
		if t.Failed() {
			// What to look at when voter 1 did not come back: whether its
			// host kept restarting it, and what its last answer was.
			t.Logf("voter 1's plugin: %d restarts, pid %d, host error %v; last answer: %s; tmpfs free %d bytes; its host's log:\n%s",
				v.plugins[0].Restarts(), v.plugins[0].Pid(), v.plugins[0].Err(), last, testutil.FreeBytes(t, mnt), v.logs[0])
		}
	}()
	testutil.WaitFor(t, 90*time.Second, "voter 1 back with everything committed", func() bool {
		k0, _, err := clients[0].Children(ctx, "/w", core.ReadOptions{})
		last = fmt.Sprintf("%d children, %v", len(k0), err)
		return err == nil && len(k0) == n
	})
	res, err := clients[0].GetMany(ctx, []string{"/w/00", fmt.Sprintf("/w/%02d", n-1)}, core.ReadOptions{})
	if err != nil || res[0].Err != nil || res[1].Err != nil || len(res[1].Node.Data) != len(big) {
		t.Fatalf("values on voter 1 after the restart: %+v, %v", res, err)
	}
}

// TestBootstrapOnADiskBelowTheReserve: member 1 of three is bootstrapped
// on a real 20 MiB tmpfs, below the default 64 MiB
// coordinator.raft.disk.min-free. Bootstrap formats it and warns; its
// start is not refused as unbootstrapped: it says that its disk is below
// the reserve (free space, reserve, the key) and starts paused, while the
// other two serve; once the tmpfs is grown past the reserve it resumes and
// catches up.
func TestBootstrapOnADiskBelowTheReserve(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-voter cluster")
	}
	mnt := testutil.MountTmpfs(t, 20<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs logLines
	c := &cluster{t: t, voters: newVoters(t, 3), members: make([]*Provider, 3),
		mutate: func(i int, o *Options) {
			if i == 0 {
				o.DiskMinFree = 0 // the default, 64 MiB
				o.Logf = logs.add
			}
		}}
	c.dirs = []string{filepath.Join(mnt, "m1"), filepath.Join(t.TempDir(), "m2"), filepath.Join(t.TempDir(), "m3")}
	t.Cleanup(c.stopAll)
	res, err := Bootstrap(ctx, c.options(0))
	if err != nil {
		t.Fatalf("bootstrap on the small disk: %v", err)
	}
	if !strings.Contains(res.DiskWarning, "below coordinator.raft.disk.min-free 64") || !strings.Contains(res.DiskWarning, "paused") {
		t.Errorf("bootstrap's warning: %q, want the free space below coordinator.raft.disk.min-free and the pause", res.DiskWarning)
	}
	for _, i := range []int{1, 2} {
		if _, err := Bootstrap(ctx, c.options(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.start(0); err != nil {
		t.Fatalf("start of the member on the small disk: %v, want a paused start", err)
	}
	if st := c.mustStatus(0); !strings.Contains(st.Details["diskFull"], "disk full on voter 1") {
		t.Fatalf("status of the member on the small disk: %+v, want it paused", st.Details)
	}
	want := "below coordinator.raft.disk.min-free 64"
	if !logs.contains(want) || !logs.contains("starts with its replica paused") {
		t.Fatalf("the start's log does not say %q and that it starts paused: %q", want, logs.all())
	}
	if err := c.startParallel(1, 2); err != nil {
		t.Fatal(err)
	}
	l := c.waitLeader()
	if l == 0 {
		t.Fatal("the paused member leads")
	}
	if _, _, err := core.Create(ctx, c.client(l), "/while-paused", nil, core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", syscall.MS_REMOUNT, fmt.Sprintf("size=%d", 200<<20)); err != nil {
		t.Fatalf("grow the tmpfs: %v", err)
	}
	testutil.WaitFor(t, 60*time.Second, "member 1 resumed", func() bool {
		st, err := c.members[0].Status()
		return err == nil && st.Details["diskFull"] == ""
	})
	cl := c.client(0)
	testutil.WaitFor(t, 60*time.Second, "member 1 caught up with the write made while it was paused", func() bool {
		res, err := cl.GetMany(ctx, []string{"/while-paused"}, core.ReadOptions{Stale: true})
		return err == nil && res[0].Err == nil
	})
}

// logLines collects a member's log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logLines) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func (l *logLines) contains(s string) bool { return strings.Contains(l.all(), s) }
