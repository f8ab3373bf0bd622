package netfault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/internal/testutil"
)

// The ports every coordinator listens on, each on its own node's address.
const (
	ClientPort = 9123
	RaftPort   = 9124
)

// Coordinator is a `metaplane coordinator` process on a node.
type Coordinator struct {
	ID     string // its coordinator (and, on Raft, replica) id: "1", "2", ...
	Node   *Node
	Client string // its client listener, ip:port
	Raft   string // its Raft address, ip:port (Raft backend)
	args   []string
	nt     *Net
	// tablet are the settings a tablet server of this cluster needs (its
	// backend's: the seeds on Raft, the ensemble on ZooKeeper).
	tablet []string

	mu   sync.Mutex
	proc *Proc
	gen  int
}

// Proc is the coordinator's current process.
func (c *Coordinator) Proc() *Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc
}

// Kill kills the coordinator's process (SIGKILL, its plugin with it) and
// waits for it to exit.
func (c *Coordinator) Kill() { c.Proc().Kill() }

// Restart starts the coordinator again with the same settings (after
// Kill).
func (c *Coordinator) Restart() {
	c.mu.Lock()
	c.gen++
	name := fmt.Sprintf("coordinator %s (start %d)", c.ID, c.gen+1)
	c.mu.Unlock()
	p := c.nt.Start(c.Node, name, testutil.Binary(c.nt.t, "metaplane"), c.args...)
	c.mu.Lock()
	c.proc = p
	c.mu.Unlock()
}

// coordinatorArgs is the common command line of a coordinator on node nd.
func coordinatorArgs(t testing.TB, nd *Node, extra []string) []string {
	pluginDir := filepath.Dir(testutil.Binary(t, "metaplane-backend-raft"))
	testutil.Binary(t, "metaplane-backend-zookeeper")
	args := []string{"coordinator", "--no-env", "--log-level", logLevel(),
		"-D", "metadata.backend.plugin.dir=" + pluginDir,
		"-D", "metrics.address=127.0.0.1:0",
		"-D", "bind.listeners=CLIENT://" + nd.Addr(ClientPort),
	}
	for _, e := range extra {
		args = append(args, "-D", e)
	}
	return args
}

// StartRaftCoordinators starts one coordinator on the Raft backend on
// each of nodes (voters 1..n in that order), their directories formatted
// first (`metaplane raft bootstrap`), and returns them once started (not
// yet elected: see WaitLeader). extra are more -D settings for every one.
func (nt *Net) StartRaftCoordinators(nodes []int, extra ...string) []*Coordinator {
	t := nt.t
	t.Helper()
	var voters, clients []string
	for i, n := range nodes {
		voters = append(voters, fmt.Sprintf("%d@%s", i+1, nt.Nodes[n].Addr(RaftPort)))
		clients = append(clients, nt.Nodes[n].Addr(ClientPort))
	}
	var cs []*Coordinator
	var boot [][]string
	for i, n := range nodes {
		nd := nt.Nodes[n]
		id := strconv.Itoa(i + 1)
		dir := filepath.Join(t.TempDir(), "raft")
		settings := append([]string{
			"coordinator.seed.nodes=" + strings.Join(clients, ","),
			"coordinator.raft.voters=" + strings.Join(voters, ","),
			"coordinator.raft.node.id=" + id,
			"coordinator.raft.port=" + strconv.Itoa(RaftPort),
			"coordinator.raft.dir=" + dir,
		}, extra...)
		c := &Coordinator{ID: id, Node: nd, Client: nd.Addr(ClientPort), Raft: nd.Addr(RaftPort), nt: nt,
			tablet: []string{"coordinator.seed.nodes=" + strings.Join(clients, ",")}}
		c.args = coordinatorArgs(t, nd, settings)
		cs = append(cs, c)
		boot = append(boot, c.args)
	}
	if len(nodes) > 1 {
		testutil.RaftBootstrap(t, testutil.Binary(t, "metaplane"), boot...)
	}
	for _, c := range cs {
		c.proc = nt.Start(c.Node, "coordinator "+c.ID, testutil.Binary(t, "metaplane"), c.args...)
	}
	return cs
}

// StartZooKeeperCoordinators starts one coordinator on the ZooKeeper
// backend on each of nodes, connected to connect (the ensemble's
// host:port list). extra are more -D settings for every one.
func (nt *Net) StartZooKeeperCoordinators(nodes []int, connect string, extra ...string) []*Coordinator {
	t := nt.t
	t.Helper()
	var cs []*Coordinator
	for i, n := range nodes {
		nd := nt.Nodes[n]
		id := strconv.Itoa(i + 1)
		settings := append([]string{"zookeeper.address=" + connect}, extra...)
		c := &Coordinator{ID: id, Node: nd, Client: nd.Addr(ClientPort), nt: nt, tablet: settings}
		c.args = coordinatorArgs(t, nd, settings)
		c.proc = nt.Start(c.Node, "coordinator "+c.ID, testutil.Binary(t, "metaplane"), c.args...)
		cs = append(cs, c)
	}
	return cs
}

// Addrs is the coordinators' client addresses.
func Addrs(cs []*Coordinator) []string {
	var a []string
	for _, c := range cs {
		a = append(a, c.Client)
	}
	return a
}

// LeaderView is what one coordinator said of the leadership.
type LeaderView struct {
	Index    int // the answering coordinator's index in the slice
	IsLeader bool
	LeaderID string
	Epoch    int64
	Err      error
}

// Views asks every coordinator (in parallel, each within timeout) who
// leads, from the root namespace.
func Views(ctx context.Context, cl *adminclient.Client, cs []*Coordinator, timeout time.Duration) []LeaderView {
	out := make([]LeaderView, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			r, err := cl.GetLeaderFrom(cctx, c.Client)
			out[i] = LeaderView{Index: i, Err: err}
			if err == nil {
				out[i].IsLeader, out[i].LeaderID, out[i].Epoch = r.IsLeader, r.LeaderId, r.Epoch
			}
		}()
	}
	wg.Wait()
	return out
}

// ErrNoLeader: no coordinator said it leads.
var ErrNoLeader = errors.New("netfault: no coordinator leads")

// Leader is the index of the coordinator that says it leads at the highest
// epoch, with that epoch.
func Leader(ctx context.Context, cl *adminclient.Client, cs []*Coordinator) (int, int64, error) {
	best, epoch := -1, int64(-1)
	for _, v := range Views(ctx, cl, cs, time.Second) {
		if v.Err == nil && v.IsLeader && v.Epoch > epoch {
			best, epoch = v.Index, v.Epoch
		}
	}
	if best < 0 {
		return -1, 0, ErrNoLeader
	}
	return best, epoch, nil
}

// WaitLeader waits (up to timeout) until a coordinator leads and returns
// its index and epoch.
func WaitLeader(t testing.TB, cl *adminclient.Client, cs []*Coordinator, timeout time.Duration) (int, int64) {
	t.Helper()
	var l int
	var e int64
	testutil.WaitFor(t, timeout, "a coordinator to lead", func() bool {
		var err error
		l, e, err = Leader(context.Background(), cl, cs)
		return err == nil
	})
	return l, e
}

// logLevel is the coordinators' log level: METAPLANE_FAULTS_LOG_LEVEL
// (debug lets Dragonboat's elections and votes through), default info.
func logLevel() string {
	if l := os.Getenv("METAPLANE_FAULTS_LOG_LEVEL"); l != "" {
		return l
	}
	return "info"
}
