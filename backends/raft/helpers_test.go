package raft

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// testOptions are fast options for tests: short timeouts, tiny LogDB.
func testOptions(dir string, id uint64, voters []Voter) Options {
	return Options{
		Voters: voters, NodeID: id, Dir: dir,
		Heartbeat: 50 * time.Millisecond, ElectionTimeout: 400 * time.Millisecond,
		FirstElectionTimeout: 100 * time.Millisecond, CatchupTimeout: 5 * time.Second,
		ProposalTimeout: 3 * time.Second, SessionTimeout: 2 * time.Second,
		LogDBProfile: LogDBTiny, SnapshotThreshold: 1000,
		Logf: func(string, ...any) {},
	}
}

// cluster is n in-process members on loopback.
type cluster struct {
	t       testing.TB
	voters  []Voter
	dirs    []string
	members []*Provider
	mutate  func(i int, o *Options)
}

func newVoters(t testing.TB, n int) []Voter {
	voters := make([]Voter, n)
	for i := range voters {
		voters[i] = Voter{ID: uint64(i + 1), Address: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))}
	}
	return voters
}

func startCluster(t testing.TB, n int, mutate func(i int, o *Options)) *cluster {
	t.Helper()
	c := launchCluster(t, newVoters(t, n), mutate)
	c.waitLeader()
	return c
}

// launchCluster bootstraps a member per voter and starts them in
// parallel, without waiting for a leader.
func launchCluster(t testing.TB, voters []Voter, mutate func(i int, o *Options)) *cluster {
	t.Helper()
	n := len(voters)
	c := &cluster{t: t, voters: voters, members: make([]*Provider, n), mutate: mutate}
	root := t.TempDir()
	for i := 0; i < n; i++ {
		c.dirs = append(c.dirs, filepath.Join(root, fmt.Sprintf("m%d", i+1)))
	}
	t.Cleanup(c.stopAll)
	c.bootstrap()
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	if err := c.startParallel(all...); err != nil {
		t.Fatalf("start members: %v", err)
	}
	return c
}

// bootstrap formats every member's directory with Bootstrap, as an
// operator runs `metaplane raft bootstrap` before a multi-voter cluster's
// first start.
func (c *cluster) bootstrap() {
	c.t.Helper()
	opts := make([]Options, len(c.dirs))
	for i := range opts {
		opts[i] = c.options(i)
	}
	bootstrapAll(c.t, opts)
}

// bootstrapAll runs Bootstrap on every member of opts (a multi-voter
// set), in parallel.
func bootstrapAll(t interface {
	Helper()
	Fatalf(string, ...any)
}, opts []Options) {
	t.Helper()
	if len(opts) < 2 {
		return
	}
	errs := make(chan error, len(opts))
	for _, o := range opts {
		go func(o Options) {
			_, err := Bootstrap(context.Background(), o)
			errs <- err
		}(o)
	}
	// Every Bootstrap is waited for before failing (see launchCluster).
	var failed []error
	for range opts {
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		t.Fatalf("bootstrap members: %v", errors.Join(failed...))
	}
}

func (c *cluster) options(i int) Options {
	o := testOptions(c.dirs[i], uint64(i+1), c.voters)
	if c.mutate != nil {
		c.mutate(i, &o)
	}
	return o
}

func (c *cluster) start(i int) error {
	p := NewProvider(c.options(i))
	if err := p.Start(context.Background(), nil); err != nil {
		return err
	}
	c.members[i] = p
	return nil
}

// startParallel starts members is at once and returns when every start
// returned (their errors joined): a test fails only then, since failing
// runs the cleanups (stopAll, the temporary directory's removal), which
// must not race a member still starting in it.
func (c *cluster) startParallel(is ...int) error {
	errs := make(chan error, len(is))
	for _, i := range is {
		go func(i int) { errs <- c.start(i) }(i)
	}
	var failed []error
	for range is {
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	return errors.Join(failed...)
}

func (c *cluster) stop(i int) {
	if p := c.members[i]; p != nil {
		p.Close()
		c.members[i] = nil
	}
}

func (c *cluster) stopAll() {
	for i := range c.members {
		c.stop(i)
	}
}

// leader returns the index of the member that is Raft leader, or -1.
func (c *cluster) leader() int {
	for i, p := range c.members {
		if p == nil {
			continue
		}
		if st, err := p.Status(); err == nil && st.Role == core.RoleLeader {
			return i
		}
	}
	return -1
}

func (c *cluster) waitLeader() int {
	c.t.Helper()
	var l int
	testutil.WaitFor(c.t, 20*time.Second, "a Raft leader", func() bool { l = c.leader(); return l >= 0 })
	return l
}

func (c *cluster) client(i int) *Client {
	c.t.Helper()
	// A member that is still catching up (or a cluster still electing)
	// may time a session grant out: retry for a while. The grant's own
	// timeout is ErrUnavailable after the proposal timeout, or, when that
	// is longer than an attempt here (a test's minute), this attempt's
	// deadline: a read forwarded while restarted members' connections are
	// set up can be lost, and its retries wait twice as long each time.
	deadline := time.Now().Add(30 * time.Second)
	var cl *Client
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var err error
		cl, err = c.members[i].Client(ctx, core.ClientOptions{Name: fmt.Sprintf("test-%d", i)})
		cancel()
		if err == nil {
			break
		}
		if !(errors.Is(err, core.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)) || time.Now().After(deadline) {
			c.t.Fatalf("client of member %d: %v", i+1, err)
		}
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}
