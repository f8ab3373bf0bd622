// Package netfault runs a test's processes on a network of their own and
// breaks that network on purpose.
//
// New makes a Linux bridge with a private /24 (10.213.X.0/24, X chosen per
// run), and one network namespace per node, joined to the bridge by a veth
// pair: node i has address 10.213.X.(10+i) and its own loopback; the root
// namespace has 10.213.X.1 on the bridge, so clients in the test process
// reach every node. Start runs a process inside a node's namespace (`ip
// netns exec`).
//
// The nemesis is iptables rules in the namespaces' INPUT chains, replaced
// as a whole on every change (iptables-restore): Cut drops or refuses (TCP
// reset) the packets from some nodes to others, one way; Partition does it
// both ways; Heal removes every rule. Rules never touch the root
// namespace: clients keep reaching every node unless a test cuts them
// (Cut with Clients, which puts the rules in the node's namespace).
//
// Everything New creates (namespaces, veths, the bridge, the processes)
// is removed by t.Cleanup, also when the test fails. A run that crashed
// before its cleanup leaves names with the prefix "mpf" and a state file
// in StateDir naming its process: New removes the leftovers of every run
// whose process is gone.
//
// It needs root, the `ip` command (iproute2) and `iptables` (Debian's
// `iptables` package; scripts/ensure-test-deps.sh installs it). Where it
// cannot make namespaces, New skips the test, except under CI=true where
// it fails it (testutil.RequireOrSkip).
package netfault

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/internal/testutil"
)

// StateDir holds one file per live run: "<pid> <subnet>", named after the
// run's id.
const StateDir = "/run/metaplane-netfault"

// prefix starts every name the package gives a namespace or a link.
const prefix = "mpf"

// Mode is how a cut treats the packets it stops.
type Mode int

const (
	// Drop discards the packets silently (a firewall's DROP, a broken
	// switch): the sender sees nothing at all.
	Drop Mode = iota + 1
	// Refuse answers TCP packets with a reset (REJECT --reject-with
	// tcp-reset): a connect fails at once with "connection refused", an
	// open connection with "connection reset". Other packets are dropped.
	Refuse
)

func (m Mode) String() string {
	switch m {
	case Drop:
		return "drop"
	case Refuse:
		return "refuse"
	}
	return "none"
}

// Clients stands for the root namespace (the test process and its
// clients) in CutClients.
const Clients = -1

// Node is one network namespace with its address.
type Node struct {
	Index int
	NS    string // the namespace's name
	IP    string // its address on the bridge
	veth  string // the root side of its veth pair
}

// Addr is ip:port on this node.
func (n *Node) Addr(port int) string { return n.IP + ":" + strconv.Itoa(port) }

// Net is one test's network. Its methods are safe for concurrent use.
type Net struct {
	t      testing.TB
	run    string
	subnet int
	bridge string
	Nodes  []*Node
	RootIP string

	mu    sync.Mutex
	cuts  map[[2]int]Mode // {from, to} node index (Clients: the root namespace) -> mode
	procs []*Proc
	log   []string // the nemesis's actions, for the test's log
}

// Available reports whether New can work here, and if not, why: root, the
// ip and iptables commands, and a namespace made and removed.
func Available() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "network namespaces need root"
	}
	for _, c := range []string{"ip", "iptables", "iptables-restore"} {
		if _, err := exec.LookPath(c); err != nil {
			return false, fmt.Sprintf("%s not found on PATH (Debian: apt-get install iptables iproute2; scripts/ensure-test-deps.sh)", c)
		}
	}
	name := fmt.Sprintf("%sprobe%d", prefix, os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return false, fmt.Sprintf("ip netns add: %v: %s", err, bytes.TrimSpace(out))
	}
	defer exec.Command("ip", "netns", "del", name).Run()
	if out, err := exec.Command("ip", "netns", "exec", name, "iptables", "-S").CombinedOutput(); err != nil {
		return false, fmt.Sprintf("iptables in a namespace: %v: %s", err, bytes.TrimSpace(out))
	}
	return true, ""
}

// New makes a network of n nodes for t (see the package doc), removed by
// t.Cleanup. It skips t where namespaces cannot be made (fails it under
// CI=true).
func New(t testing.TB, n int) *Net {
	t.Helper()
	ok, why := Available()
	testutil.RequireOrSkip(t, ok, "network namespaces: %s", why)
	if n < 1 || n > 200 {
		t.Fatalf("netfault.New: %d nodes, want 1 to 200", n)
	}
	if err := os.MkdirAll(StateDir, 0o755); err != nil {
		t.Fatalf("netfault: %v", err)
	}
	unlock, err := lockState()
	if err != nil {
		t.Fatalf("netfault: %v", err)
	}
	var b [2]byte
	rand.Read(b[:])
	nt := &Net{t: t, run: hex.EncodeToString(b[:]), cuts: map[[2]int]Mode{}}
	used := cleanStale(t.Logf)
	for x := 1 + int(b[0])%250; ; x = x%250 + 1 {
		if !used[x] {
			nt.subnet = x
			break
		}
	}
	err = os.WriteFile(filepath.Join(StateDir, nt.run), fmt.Appendf(nil, "%d %d\n", os.Getpid(), nt.subnet), 0o644)
	unlock()
	if err != nil {
		t.Fatalf("netfault: %v", err)
	}
	t.Cleanup(nt.close)
	nt.bridge = prefix + nt.run + "br"
	nt.RootIP = nt.ip(1)
	if err := nt.setup(n); err != nil {
		t.Fatalf("netfault: %v", err)
	}
	return nt
}

func (nt *Net) ip(host int) string { return fmt.Sprintf("10.213.%d.%d", nt.subnet, host) }

func (nt *Net) setup(n int) error {
	cmds := [][]string{
		{"ip", "link", "add", nt.bridge, "type", "bridge"},
		{"ip", "addr", "add", nt.RootIP + "/24", "dev", nt.bridge},
		{"ip", "link", "set", nt.bridge, "up"},
	}
	for i := 0; i < n; i++ {
		nd := &Node{Index: i, NS: fmt.Sprintf("%s%s-%d", prefix, nt.run, i), IP: nt.ip(10 + i),
			veth: fmt.Sprintf("%s%sv%d", prefix, nt.run, i)}
		peer := nd.veth + "p"
		nt.Nodes = append(nt.Nodes, nd)
		cmds = append(cmds,
			[]string{"ip", "netns", "add", nd.NS},
			[]string{"ip", "link", "add", nd.veth, "type", "veth", "peer", "name", peer},
			[]string{"ip", "link", "set", peer, "netns", nd.NS},
			[]string{"ip", "link", "set", nd.veth, "master", nt.bridge},
			[]string{"ip", "link", "set", nd.veth, "up"},
			[]string{"ip", "-n", nd.NS, "link", "set", peer, "name", "eth0"},
			[]string{"ip", "-n", nd.NS, "addr", "add", nd.IP + "/24", "dev", "eth0"},
			[]string{"ip", "-n", nd.NS, "link", "set", "eth0", "up"},
			[]string{"ip", "-n", nd.NS, "link", "set", "lo", "up"},
		)
	}
	for _, c := range cmds {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(c, " "), err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// close kills the processes and removes the namespaces, the links and the
// run's state file.
func (nt *Net) close() {
	nt.mu.Lock()
	procs := nt.procs
	nt.procs = nil
	nt.mu.Unlock()
	for _, p := range procs {
		p.Kill()
	}
	if nt.t.Failed() {
		for _, l := range nt.nemesisLog() {
			nt.t.Logf("nemesis: %s", l)
		}
	}
	removeRun(nt.run)
}

// removeRun removes every namespace and link of run id (with the
// processes left in its namespaces) and its state file.
func removeRun(id string) {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], prefix+id+"-") {
			continue
		}
		pids, _ := exec.Command("ip", "netns", "pids", f[0]).Output()
		for _, p := range strings.Fields(string(pids)) {
			if pid, err := strconv.Atoi(p); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		exec.Command("ip", "netns", "del", f[0]).Run()
	}
	links, _ := exec.Command("ip", "-o", "link", "show").Output()
	for _, line := range strings.Split(string(links), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if strings.HasPrefix(name, prefix+id) {
			exec.Command("ip", "link", "del", name).Run()
		}
	}
	os.Remove(filepath.Join(StateDir, id))
}

var runName = regexp.MustCompile(`^` + prefix + `([0-9a-f]{4})`)

// cleanStale removes the leftovers of runs whose process is gone and
// returns the subnets of the live ones. The caller holds the state lock.
func cleanStale(logf func(string, ...any)) map[int]bool {
	used := map[int]bool{}
	live := map[string]bool{}
	entries, _ := os.ReadDir(StateDir)
	for _, e := range entries {
		if e.Name() == ".lock" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(StateDir, e.Name()))
		var pid, subnet int
		if err == nil {
			fmt.Sscanf(string(b), "%d %d", &pid, &subnet)
		}
		if pid > 0 && syscall.Kill(pid, 0) == nil {
			live[e.Name()] = true
			used[subnet] = true
		}
	}
	stale := map[string]bool{}
	out, _ := exec.Command("ip", "netns", "list").Output()
	links, _ := exec.Command("ip", "-o", "link", "show").Output()
	for _, line := range strings.Split(string(out)+"\n"+string(links), "\n") {
		for _, f := range strings.Fields(line) {
			if m := runName.FindStringSubmatch(strings.TrimSuffix(f, ":")); m != nil && !live[m[1]] {
				stale[m[1]] = true
			}
		}
	}
	for _, e := range entries {
		if e.Name() != ".lock" && !live[e.Name()] {
			stale[e.Name()] = true
		}
	}
	for id := range stale {
		logf("netfault: removing the leftovers of run %s (its process is gone)", id)
		removeRun(id)
	}
	return used
}

// lockState serializes New across test processes (flock on a file in
// StateDir).
func lockState() (func(), error) {
	f, err := os.OpenFile(filepath.Join(StateDir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// Proc is a process running in a node's namespace.
type Proc struct {
	Node *Node
	Name string
	Cmd  *exec.Cmd
	Out  *testutil.SyncBuffer
	done chan struct{}
	once sync.Once
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Kill sends SIGKILL to the process's group (its children too) and waits
// for it to exit.
func (p *Proc) Kill() { p.Signal(syscall.SIGKILL); <-p.done }

// Signal sends sig to the process's group.
func (p *Proc) Signal(sig syscall.Signal) {
	if p.Cmd.Process != nil {
		syscall.Kill(-p.Cmd.Process.Pid, sig)
	}
}

// Start runs bin with args inside node's namespace (nil: the test's own,
// where the clients are), in a process group of
// its own, killed at the end of the test (and with the test process: its
// parent-death signal is SIGKILL). Its output is kept and logged when the
// test fails.
func (nt *Net) Start(node *Node, name, bin string, args ...string) *Proc {
	nt.t.Helper()
	p := &Proc{Node: node, Name: name, Out: &testutil.SyncBuffer{}, done: make(chan struct{})}
	where, ns := "the test's namespace", "-"
	if node == nil {
		// The test's own namespace, beside the clients.
		p.Cmd = exec.Command(bin, args...)
	} else {
		p.Cmd = exec.Command("ip", append([]string{"netns", "exec", node.NS, bin}, args...)...)
		where, ns = node.NS, node.IP
	}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Out, p.Out
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.Cmd.Start(); err != nil {
		nt.t.Fatalf("netfault: start %s in %s: %v", name, where, err)
	}
	go func() { p.Cmd.Wait(); close(p.done) }()
	nt.mu.Lock()
	nt.procs = append(nt.procs, p)
	nt.mu.Unlock()
	t := nt.t
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			out := p.Out.String()
			if len(out) > 400000 {
				out = "..." + out[len(out)-400000:]
			}
			t.Logf("---- %s (%s, %s) ----\n%s", name, where, ns, out)
		}
	})
	return p
}

// Cut stops the packets from every node of from to every node of to (one
// way), as mode says; Clients in either set stands for the root
// namespace. It adds to the cuts in place; a pair already cut takes the
// new mode.
func (nt *Net) Cut(from, to []int, mode Mode) error {
	nt.mu.Lock()
	for _, f := range from {
		for _, d := range to {
			if f != d {
				nt.cuts[[2]int{f, d}] = mode
			}
		}
	}
	nt.mu.Unlock()
	nt.note("cut %v -> %v (%s)", from, to, mode)
	return nt.apply()
}

// Partition cuts a from b both ways.
func (nt *Net) Partition(a, b []int, mode Mode) error {
	nt.mu.Lock()
	for _, x := range a {
		for _, y := range b {
			if x != y {
				nt.cuts[[2]int{x, y}] = mode
				nt.cuts[[2]int{y, x}] = mode
			}
		}
	}
	nt.mu.Unlock()
	nt.note("partition %v | %v (%s)", a, b, mode)
	return nt.apply()
}

// Isolate cuts node i from every other node both ways; the clients still
// reach it.
func (nt *Net) Isolate(i int, mode Mode) error {
	var rest []int
	for _, n := range nt.Nodes {
		if n.Index != i {
			rest = append(rest, n.Index)
		}
	}
	return nt.Partition([]int{i}, rest, mode)
}

// Bridge cuts a from c both ways; the nodes in neither set still reach
// both sides: a "bridge" partition (Jepsen's name).
func (nt *Net) Bridge(a, c []int, mode Mode) error {
	return nt.Partition(a, c, mode)
}

// Heal removes every cut.
func (nt *Net) Heal() error {
	nt.mu.Lock()
	nt.cuts = map[[2]int]Mode{}
	nt.mu.Unlock()
	nt.note("heal")
	return nt.apply()
}

// Cuts returns the current cuts as "from->to:mode", sorted.
func (nt *Net) Cuts() []string {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	var s []string
	for k, m := range nt.cuts {
		s = append(s, fmt.Sprintf("%d->%d:%s", k[0], k[1], m))
	}
	sort.Strings(s)
	return s
}

func (nt *Net) note(format string, args ...any) {
	nt.mu.Lock()
	nt.log = append(nt.log, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	nt.mu.Unlock()
}

func (nt *Net) nemesisLog() []string {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	return append([]string(nil), nt.log...)
}

// addrOf is the address of node i, or the root namespace's for Clients.
func (nt *Net) addrOf(i int) string {
	if i == Clients {
		return nt.RootIP
	}
	return nt.Nodes[i].IP
}

// rules is the filter table of node i's namespace for the current cuts:
// INPUT stops what comes from a node cut towards i; OUTPUT stops what i
// sends to the root namespace when i is cut from the clients (the root
// namespace has no rules of its own).
func (nt *Net) rules(i int) string {
	var in, out []string
	add := func(dst *[]string, chain, match, ip string, m Mode) {
		if m == Refuse {
			*dst = append(*dst, fmt.Sprintf("-A %s %s %s -p tcp -j REJECT --reject-with tcp-reset", chain, match, ip))
		}
		*dst = append(*dst, fmt.Sprintf("-A %s %s %s -j DROP", chain, match, ip))
	}
	keys := make([][2]int, 0, len(nt.cuts))
	for k := range nt.cuts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		if keys[a][0] != keys[b][0] {
			return keys[a][0] < keys[b][0]
		}
		return keys[a][1] < keys[b][1]
	})
	for _, k := range keys {
		m := nt.cuts[k]
		switch {
		case k[1] == i:
			add(&in, "INPUT", "-s", nt.addrOf(k[0]), m)
		case k[0] == i && k[1] == Clients:
			add(&out, "OUTPUT", "-d", nt.RootIP, m)
		}
	}
	return "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		strings.Join(append(in, out...), "\n") + "\nCOMMIT\n"
}

// apply replaces every namespace's filter table with the current cuts.
func (nt *Net) apply() error {
	nt.mu.Lock()
	tables := make([]string, len(nt.Nodes))
	for i := range nt.Nodes {
		tables[i] = nt.rules(i)
	}
	nt.mu.Unlock()
	var errs []error
	for i, n := range nt.Nodes {
		cmd := exec.Command("ip", "netns", "exec", n.NS, "iptables-restore")
		cmd.Stdin = strings.NewReader(tables[i])
		if out, err := cmd.CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("iptables-restore in %s: %v: %s", n.NS, err, bytes.TrimSpace(out)))
		}
	}
	return errors.Join(errs...)
}

// Rules returns the rules in force in node i's namespace (iptables -S).
func (nt *Net) Rules(i int) (string, error) {
	out, err := exec.Command("ip", "netns", "exec", nt.Nodes[i].NS, "iptables", "-S").CombinedOutput()
	return string(out), err
}
