package raft

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	dragonboat "github.com/lni/dragonboat/v4"
	dbconfig "github.com/lni/dragonboat/v4/config"
	sm "github.com/lni/dragonboat/v4/statemachine"

	"github.com/metaplane/metaplane/core"
)

// DefaultDiskMinFree is the default of coordinator.raft.disk.min-free: the
// free space below which a member pauses its replica.
const DefaultDiskMinFree = 64 << 20

// diskCheckInterval is how often a member measures the free space of
// coordinator.raft.dir.
const diskCheckInterval = 250 * time.Millisecond

// Neither Dragonboat nor Pebble survives a full disk: a failed write of the
// Raft log (LogDB) or of the state machine's batch makes Dragonboat panic,
// which ends the plugin process. So a member does not let its disk fill: it
// measures the free space of coordinator.raft.dir and, below
// coordinator.raft.disk.min-free, pauses its replica (Dragonboat's
// StopReplica: this member stops taking part in the quorum and writes
// nothing more), after handing the leadership to another voter if it led.
// Its writes and reads are refused with a message naming the condition;
// the rest of the quorum keeps serving. When the free space is back above
// the reserve it starts the replica again, which catches up from the
// leader. Nothing half-written is left behind: the replica stops between
// Raft steps, and a crash (a disk filled faster than the check) leaves
// Pebble's and Dragonboat's logs as after any crash.

// storage is the filesystem a member's two stores write through:
// Dragonboat's NodeHost (its LogDB, snapshots and metadata under
// Dir/nodehost: NodeHostConfig.Expert.FS) and the state machine's Pebble
// store (Dir/state: pebble.Options.FS). Both live under Dir, on one
// filesystem, so the guard measures the free space through the state
// machine's. The zero value is the operating system's filesystem for both;
// tests set both to one quota (quotafs_test.go).
type storage struct {
	raft  dbconfig.IFS // nil: Dragonboat's default
	state vfs.FS       // nil: vfs.Default
}

func (s storage) stateFS() vfs.FS {
	if s.state == nil {
		return vfs.Default
	}
	return s.state
}

// free reports the bytes available to this process under dir.
func (s storage) free(dir string) (uint64, error) {
	du, err := s.stateFS().GetDiskUsage(dir)
	if err != nil {
		return 0, err
	}
	return du.AvailBytes, nil
}

// openNodeHost opens the NodeHost. Opening writes (Pebble replays its WAL
// into a table): on a disk with no space left, as after a crash on a disk
// filled faster than the guard checks, it fails, and openNodeHost waits for
// space (bounded by ctx) instead of failing at once, so that a restarted
// plugin comes back by itself when space is freed.
func openNodeHost(ctx context.Context, o Options, nhc dbconfig.NodeHostConfig) (*dragonboat.NodeHost, error) {
	free := o.storage.free
	logged := false
	for {
		nh, err := dragonboat.NewNodeHost(nhc)
		if err == nil {
			return nh, nil
		}
		n, ferr := free(o.Dir)
		if ferr != nil || n >= uint64(o.DiskMinFree) {
			return nil, err
		}
		cond := fmt.Sprintf("disk full on voter %d: coordinator.raft.dir %s has %s free, below coordinator.raft.disk.min-free %s",
			o.NodeID, o.Dir, byteSize(n), byteSize(uint64(o.DiskMinFree)))
		if !logged {
			o.Logf("raft: %s; the member cannot start (%v) and waits for space", cond, err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s; it cannot start until space is freed: %w", cond, err)
		case <-time.After(diskCheckInterval):
		}
	}
}

// diskGuard pauses and resumes a member's replica on the free space of its
// directory.
type diskGuard struct {
	m       *member
	rc      dbconfig.Config
	factory func(uint64, uint64) sm.IOnDiskStateMachine
	reserve uint64
	free    func(string) (uint64, error)

	// run serializes pausing, resuming and the NodeHost's close.
	run sync.Mutex
	// initial and join are the first start's arguments while the replica
	// has not started yet (it started paused); nil and false after.
	initial map[uint64]dragonboat.Target
	join    bool

	// fatal ends the process (a panic, as Dragonboat's own on a failed log
	// write); tests replace it.
	fatal func(msg string)

	mu       sync.Mutex
	paused   bool
	lastFree uint64
	since    time.Time
	stopped  time.Time // when the pause's StopReplica returned
	errLog   bool      // a measuring error was logged
}

func newDiskGuard(m *member, rc dbconfig.Config, factory func(uint64, uint64) sm.IOnDiskStateMachine) *diskGuard {
	return &diskGuard{m: m, rc: rc, factory: factory, reserve: uint64(m.opts.DiskMinFree), free: m.opts.storage.free,
		fatal: func(msg string) { panic(msg) }}
}

// start starts the replica unless the disk is already below the reserve
// (then the loop starts it once space is back). It reports whether the
// replica runs.
func (g *diskGuard) start(initial map[uint64]dragonboat.Target, join bool) (bool, error) {
	// Bootstrap (Options.format) writes its few records whatever the
	// reserve: paused, it would leave a directory with a cluster id and
	// no Raft state, which the next start takes for an unfinished
	// bootstrap. The member's later starts pause as below.
	if free, err := g.free(g.m.opts.Dir); err == nil && free < g.reserve && !g.m.opts.format {
		g.mu.Lock()
		g.paused, g.lastFree, g.since = true, free, time.Now()
		g.mu.Unlock()
		g.initial, g.join = initial, join
		g.m.opts.Logf("raft: %s; member %d starts with its replica paused until space is freed", g.condition(), g.m.replicaID)
		return false, nil
	}
	return true, g.m.nh.StartOnDiskReplica(initial, join, g.factory, g.rc)
}

// loop measures the free space until the member closes.
func (g *diskGuard) loop() {
	defer g.m.wg.Done()
	t := time.NewTicker(diskCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-g.m.stop:
			return
		case <-t.C:
		}
		g.check()
	}
}

func (g *diskGuard) check() {
	free, err := g.free(g.m.opts.Dir)
	g.mu.Lock()
	if err != nil {
		logged := g.errLog
		g.errLog = true
		g.mu.Unlock()
		if !logged {
			g.m.opts.Logf("raft: cannot measure the free space of coordinator.raft.dir %s: %v", g.m.opts.Dir, err)
		}
		return
	}
	g.lastFree = free
	paused := g.paused
	g.mu.Unlock()
	switch {
	case free < g.reserve && !paused:
		g.pause()
	case free >= g.reserve && paused:
		g.resume()
	}
}

// condition describes the paused state for messages and status.
func (g *diskGuard) condition() string {
	g.mu.Lock()
	free := g.lastFree
	g.mu.Unlock()
	return fmt.Sprintf("disk full on voter %d: coordinator.raft.dir %s has %s free, below coordinator.raft.disk.min-free %s",
		g.m.replicaID, g.m.opts.Dir, byteSize(free), byteSize(g.reserve))
}

// refusal is the error of a call refused while the replica is paused, nil
// otherwise. Nothing was proposed: the call was not applied.
func (g *diskGuard) refusal() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	paused := g.paused
	g.mu.Unlock()
	if !paused {
		return nil
	}
	return fmt.Errorf("%w: raft: %s; this member refuses writes and reads until space is freed (nothing was applied)", core.ErrUnavailable, g.condition())
}

// details adds the disk condition to a status.
func (g *diskGuard) details(d map[string]string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	paused, free, since := g.paused, g.lastFree, g.since
	g.mu.Unlock()
	d["diskMinFree"] = strconv.FormatUint(g.reserve, 10)
	if free > 0 || paused {
		d["diskFree"] = strconv.FormatUint(free, 10)
	}
	if paused {
		d["diskFull"] = g.condition() + "; replica paused since " + since.UTC().Format(time.RFC3339)
	}
}

// begin takes g.run for a pause or a resume and reports whether the member
// is still open; when it is, the caller unlocks g.run.
func (g *diskGuard) begin() bool {
	g.run.Lock()
	g.m.mu.Lock()
	closed := g.m.closed
	g.m.mu.Unlock()
	if closed {
		g.run.Unlock()
	}
	return !closed
}

// pause hands the leadership away if this member leads, then stops the
// replica.
func (g *diskGuard) pause() {
	if !g.begin() {
		return
	}
	defer g.run.Unlock()
	m := g.m
	g.mu.Lock()
	g.paused, g.since = true, time.Now()
	g.mu.Unlock()
	m.opts.Logf("raft: %s; pausing the replica (writes refused) until space is freed", g.condition())
	g.handOver()
	if err := m.nh.StopReplica(shardID, m.replicaID); err != nil {
		m.opts.Logf("raft: pause replica %d: %v", m.replicaID, err)
	}
	g.mu.Lock()
	g.stopped = time.Now()
	g.mu.Unlock()
	m.mu.Lock()
	if m.holder != nil {
		m.dropHolderLocked()
	}
	if m.raftLeader == m.replicaID {
		m.raftLeader = 0
	}
	m.broadcastChangeLocked()
	m.mu.Unlock()
}

// handOver asks the most caught-up reachable voter to take the leadership
// when this member leads, and waits a bounded time for it.
func (g *diskGuard) handOver() {
	m := g.m
	if !m.isLeader() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*m.opts.ElectionTimeout)
	defer cancel()
	st := m.status(ctx)
	var target uint64
	best := int64(-1)
	for _, ms := range st.Members {
		id, _ := strconv.ParseUint(ms.ID, 10, 64)
		if id == m.replicaID || ms.Kind != core.MemberVoter || !ms.Reachable {
			continue
		}
		if best < 0 || ms.Lag < best {
			target, best = id, ms.Lag
		}
	}
	if target == 0 {
		m.opts.Logf("raft: member %d leads and no other voter is reachable: stopping without a transfer", m.replicaID)
		return
	}
	if err := m.nh.RequestLeaderTransfer(shardID, target); err != nil {
		m.opts.Logf("raft: hand the leadership to member %d: %v", target, err)
		return
	}
	for {
		m.mu.Lock()
		leader, ch := m.raftLeader, m.changeC
		m.mu.Unlock()
		if leader != m.replicaID && leader != 0 {
			m.opts.Logf("raft: member %d handed the leadership to member %d", m.replicaID, leader)
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			m.opts.Logf("raft: member %d did not take the leadership within %v; stopping anyway", target, 2*m.opts.ElectionTimeout)
			return
		}
	}
}

// resume starts the paused replica again; it catches up from the leader.
func (g *diskGuard) resume() {
	if !g.begin() {
		return
	}
	defer g.run.Unlock()
	m := g.m
	rc := g.rc
	// A joined member is non-voting until its promotion is recorded.
	_, err := os.Stat(filepath.Join(m.opts.Dir, nonVotingFile))
	rc.IsNonVoting = err == nil
	if err := m.nh.StartOnDiskReplica(g.initial, g.join, g.factory, rc); err != nil {
		if errors.Is(err, dragonboat.ErrShardAlreadyExist) {
			if msg := g.stuckWrite(time.Now()); msg != "" {
				m.opts.Logf("%s", msg)
				g.fatal(msg)
				return
			}
		}
		// The stopped replica may not be fully released yet: next check.
		m.opts.Logf("raft: resume replica %d: %v", m.replicaID, err)
		return
	}
	g.initial, g.join = nil, false
	g.mu.Lock()
	g.paused = false
	free := g.lastFree
	g.mu.Unlock()
	m.opts.Logf("raft: coordinator.raft.dir %s has %s free again: replica %d resumed, catching up", m.opts.Dir, byteSize(free), m.replicaID)
	m.mu.Lock()
	m.broadcastChangeLocked()
	m.mu.Unlock()
}

// stuckWriteAfter is how long a Raft log write begun before the pause may
// still be in flight when space is back before the member gives up on it.
const stuckWriteAfter = 5 * time.Second

// stuckWrite is, when the replica cannot be started again because its step
// worker is inside a Raft log write that began before the pause stopped
// the replica and has not returned for stuckWriteAfter, the message the
// member ends its process with; "" otherwise. Such a write never returns (see
// lazyCommit.writingSince), the stopped replica stays loaded in
// Dragonboat's engine until it does, and only a new process, which reopens
// the log from disk, brings the member back; a plugin's host restarts it.
func (g *diskGuard) stuckWrite(now time.Time) string {
	c := g.m.logdb.Load()
	if c == nil {
		return ""
	}
	began, ok := c.WritingSince()
	g.mu.Lock()
	stopped := g.stopped
	g.mu.Unlock()
	// A write begun before the replica was stopped is one the stop could
	// not end; the bound leaves a slow disk its time.
	if !ok || !began.Before(stopped) || now.Sub(began) < stuckWriteAfter {
		return ""
	}
	return fmt.Sprintf("raft: member %d cannot resume its replica: a Raft log write begun %s ago, before the replica was paused, has not returned "+
		"(the log store cannot complete it after a failed write, freed space or not); ending the process so that it restarts from disk",
		g.m.replicaID, now.Sub(began).Round(time.Millisecond))
}

// closeNodeHost closes the NodeHost once no pause or resume is running.
func (g *diskGuard) closeNodeHost() {
	g.run.Lock()
	defer g.run.Unlock()
	g.m.nh.Close()
}

// byteSize formats n bytes for a log line.
func byteSize(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}
