// Package zktest starts real ZooKeeper servers (Debian's `zookeeper`
// package, 3.8) for tests: a standalone server or an ensemble, on free
// loopback ports, each member a JVM in a child process with its own data
// directory. Members can be stopped, killed and restarted to test failures,
// and a loopback TCP Proxy cuts and restores client connections.
//
// Typical use:
//
//	zk := zktest.StartServer(t)           // one standalone server
//	ens := zktest.StartEnsemble(t, 3)     // three servers in a quorum
//	ens.Kill(0); ens.Restart(0)
//	addr := zk.ConnectString()            // "127.0.0.1:port[,...]"
//
// A JVM takes about half a second to start; a package whose tests share one
// server uses Shared(t) (one standalone server per test process) and calls
// CloseShared after m.Run in TestMain.
//
// When the server is not installed, StartServer and the like skip the test,
// except under CI=true where they fail it (testutil.RequireOrSkip). Start
// (without a testing.TB) returns ErrNotInstalled instead.
//
// The JVMs are started with Pdeathsig (SIGKILL), so they die with the test
// process even when cleanup does not run.
package zktest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/internal/ports"
	"github.com/metaplane/metaplane/internal/testutil"
)

// ErrNotInstalled is returned by Start when java or the ZooKeeper jars are
// missing. scripts/ensure-test-deps.sh installs them.
var ErrNotInstalled = errors.New("zktest: ZooKeeper server not installed (run scripts/ensure-test-deps.sh)")

// Options configure the servers Start launches. The zero value is a
// standalone server with test-friendly timings.
type Options struct {
	// Servers is the number of ensemble members; 0 or 1 is a standalone
	// server.
	Servers int
	// TickTime is the server's tick (default DefaultTickTime). Session timeouts are
	// bounded by [2, 300] ticks unless Min/MaxSessionTimeout are set.
	TickTime time.Duration
	// MinSessionTimeout and MaxSessionTimeout bound the session timeouts
	// clients may negotiate (defaults 2 ticks and 60s).
	MinSessionTimeout time.Duration
	MaxSessionTimeout time.Duration
	// StartTimeout bounds the wait for the servers to serve (default 60s).
	StartTimeout time.Duration
	// Config holds extra zoo.cfg lines ("key=value"), appended last so
	// they override the harness's own settings.
	Config []string
	// JVMFlags are extra java flags, before the class path (e.g.
	// "-Djute.maxbuffer=4194304").
	JVMFlags []string
	// Logf, when set, receives the harness's own progress messages.
	Logf func(format string, args ...any)
	// Dir, when set, holds the members' directories (and is kept on
	// Close); otherwise Start makes a temporary directory and removes it.
	Dir string
	// Production runs the servers as an operator would rather than as a
	// test fixture: forceSync=yes (every transaction fsynced before it is
	// acknowledged), ZooKeeper's default log preallocation, and the JVM's
	// default garbage collector and JIT with a 1 GiB heap. The bench uses
	// it so that the comparison with Raft is fair.
	Production bool
}

// DefaultTickTime is the test servers' tick unless Options.TickTime says
// otherwise.
const DefaultTickTime = 200 * time.Millisecond

func (o *Options) withDefaults() Options {
	r := *o
	if r.Servers < 1 {
		r.Servers = 1
	}
	if r.TickTime <= 0 {
		r.TickTime = DefaultTickTime
	}
	if r.MinSessionTimeout <= 0 {
		r.MinSessionTimeout = 2 * r.TickTime
	}
	if r.MaxSessionTimeout <= 0 {
		r.MaxSessionTimeout = 60 * time.Second
	}
	if r.StartTimeout <= 0 {
		r.StartTimeout = 60 * time.Second
	}
	if r.Logf == nil {
		r.Logf = func(string, ...any) {}
	}
	return r
}

// Cluster is a running standalone server or ensemble. Its methods are safe
// for concurrent use.
type Cluster struct {
	opts    Options
	dir     string // removed on Close when the harness created it
	ownsDir bool

	mu      sync.Mutex
	members []*member
	closed  bool
}

type member struct {
	id         int // 1-based myid
	clientPort int
	peerPort   int
	elecPort   int
	dir        string // holds zoo.cfg, data/, server.log

	proc *exec.Cmd
	done chan struct{} // closed when proc has exited
}

// Available reports whether a ZooKeeper server can be started here, and if
// not, why.
func Available() (bool, string) {
	if _, err := javaPath(); err != nil {
		return false, err.Error()
	}
	if _, err := classPath(); err != nil {
		return false, err.Error()
	}
	return true, ""
}

func javaPath() (string, error) {
	if j := os.Getenv("METAPLANE_JAVA"); j != "" {
		return j, nil
	}
	p, err := exec.LookPath("java")
	if err != nil {
		return "", fmt.Errorf("%w: java not found on PATH", ErrNotInstalled)
	}
	return p, nil
}

// classPath returns the server's class path: METAPLANE_ZK_CLASSPATH when
// set; else a minimal set of jars from /usr/share/java (ZooKeeper, jute and
// slf4j with its simple binding, logging to stderr) so the JVM starts fast
// and with exactly one slf4j binding; else the package's whole directory.
func classPath() (string, error) {
	if cp := os.Getenv("METAPLANE_ZK_CLASSPATH"); cp != "" {
		return cp, nil
	}
	const dir = "/usr/share/java"
	if _, err := os.Stat(filepath.Join(dir, "zookeeper.jar")); err != nil {
		return "", fmt.Errorf("%w: %s/zookeeper.jar missing", ErrNotInstalled, dir)
	}
	jars := []string{"zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-simple.jar"}
	var cp []string
	for _, j := range jars {
		p := filepath.Join(dir, j)
		if _, err := os.Stat(p); err != nil {
			return dir + "/*:/etc/zookeeper/conf", nil
		}
		cp = append(cp, p)
	}
	return strings.Join(cp, ":"), nil
}

// Start launches a standalone server or an ensemble and waits until every
// member serves. The caller must Close the cluster. Errors: ErrNotInstalled,
// or why a server did not start (with the tail of its log).
func Start(opts Options) (*Cluster, error) {
	if opts.Dir != "" {
		if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("zktest: %w", err)
		}
		return start(opts, opts.Dir)
	}
	dir, err := os.MkdirTemp("", "zktest-")
	if err != nil {
		return nil, fmt.Errorf("zktest: temp dir: %w", err)
	}
	c, err := start(opts, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c.ownsDir = true
	return c, nil
}

func start(opts Options, dir string) (*Cluster, error) {
	if ok, why := Available(); !ok {
		return nil, fmt.Errorf("%w (%s)", ErrNotInstalled, why)
	}
	o := opts.withDefaults()
	var lastErr error
	// Ports are picked free but may be taken by someone else before the JVM
	// binds them: retry with new ports a few times.
	for attempt := 0; attempt < 3; attempt++ {
		c := &Cluster{opts: o, dir: dir}
		if err := c.layout(attempt); err != nil {
			return nil, err
		}
		for _, m := range c.members {
			if err := c.launch(m); err != nil {
				c.Close()
				return nil, err
			}
		}
		err := c.waitAll(o.StartTimeout)
		if err == nil {
			o.Logf("zktest: %d server(s) ready at %s", o.Servers, c.ConnectString())
			return c, nil
		}
		lastErr = err
		c.stopAll()
		o.Logf("zktest: start attempt %d failed: %v", attempt+1, err)
	}
	return nil, lastErr
}

func freePort() (int, error) {
	p, err := ports.Free()
	if err != nil {
		return 0, fmt.Errorf("zktest: free port: %w", err)
	}
	return p, nil
}

// layout picks ports and writes each member's zoo.cfg and myid.
func (c *Cluster) layout(attempt int) error {
	n := c.opts.Servers
	for i := 1; i <= n; i++ {
		m := &member{id: i, dir: filepath.Join(c.dir, fmt.Sprintf("a%d-s%d", attempt, i))}
		var err error
		if m.clientPort, err = freePort(); err != nil {
			return err
		}
		if n > 1 {
			if m.peerPort, err = freePort(); err != nil {
				return err
			}
			if m.elecPort, err = freePort(); err != nil {
				return err
			}
		}
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		if err := os.MkdirAll(filepath.Join(m.dir, "data"), 0o755); err != nil {
			return fmt.Errorf("zktest: %w", err)
		}
		var b strings.Builder
		tick := c.opts.TickTime.Milliseconds()
		fmt.Fprintf(&b, "tickTime=%d\n", tick)
		fmt.Fprintf(&b, "initLimit=%d\nsyncLimit=%d\n", 25, 10)
		fmt.Fprintf(&b, "dataDir=%s\n", filepath.Join(m.dir, "data"))
		fmt.Fprintf(&b, "clientPort=%d\nclientPortAddress=127.0.0.1\n", m.clientPort)
		fmt.Fprintf(&b, "minSessionTimeout=%d\nmaxSessionTimeout=%d\n",
			c.opts.MinSessionTimeout.Milliseconds(), c.opts.MaxSessionTimeout.Milliseconds())
		b.WriteString("admin.enableServer=false\n4lw.commands.whitelist=*\n")
		if c.opts.Production {
			b.WriteString("forceSync=yes\nmaxClientCnxns=0\n")
		} else {
			// Test servers: no 64 MiB log preallocation, no fsync per txn
			// (the OS page cache survives a killed JVM), no periodic purge.
			b.WriteString("preAllocSize=1024\nforceSync=no\nmaxClientCnxns=0\n")
		}
		if len(c.members) > 1 {
			b.WriteString("standaloneEnabled=false\nreconfigEnabled=false\n")
			for _, p := range c.members {
				fmt.Fprintf(&b, "server.%d=127.0.0.1:%d:%d\n", p.id, p.peerPort, p.elecPort)
			}
			if err := os.WriteFile(filepath.Join(m.dir, "data", "myid"), []byte(strconv.Itoa(m.id)+"\n"), 0o644); err != nil {
				return fmt.Errorf("zktest: %w", err)
			}
		}
		for _, line := range c.opts.Config {
			b.WriteString(strings.TrimSpace(line) + "\n")
		}
		if err := os.WriteFile(filepath.Join(m.dir, "zoo.cfg"), []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("zktest: %w", err)
		}
	}
	return nil
}

// launch starts m's JVM. The caller holds no lock or c.mu.
func (c *Cluster) launch(m *member) error {
	java, err := javaPath()
	if err != nil {
		return err
	}
	cp, err := classPath()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(m.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("zktest: %w", err)
	}
	args := []string{"-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"}
	if c.opts.Production {
		args = []string{"-Xmx1g"}
	}
	args = append(args,
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-Dorg.slf4j.simpleLogger.showDateTime=true",
		"-Dzookeeper.jmx.log4j.disable=true",
		"-Dzookeeper.admin.enableServer=false",
	)
	args = append(args, c.opts.JVMFlags...)
	args = append(args, "-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(m.dir, "zoo.cfg"))
	cmd := exec.Command(java, args...)
	cmd.Dir = m.dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("zktest: start server %d: %w", m.id, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		logf.Close()
		close(done)
	}()
	c.mu.Lock()
	m.proc, m.done = cmd, done
	c.mu.Unlock()
	return nil
}

func (c *Cluster) waitAll(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for i := range c.members {
		if err := c.waitServing(i, deadline); err != nil {
			return err
		}
	}
	return nil
}

// waitServing polls member i with the `srvr` four-letter word until it
// reports a serving mode, its process exits, or deadline passes.
func (c *Cluster) waitServing(i int, deadline time.Time) error {
	c.mu.Lock()
	m := c.members[i]
	done := m.done
	c.mu.Unlock()
	addr := fmt.Sprintf("127.0.0.1:%d", m.clientPort)
	for {
		out, err := FourLetter(addr, "srvr", time.Second)
		if err == nil && strings.Contains(out, "Mode: ") {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("zktest: server %d exited during start-up; log tail:\n%s", m.id, c.LogTail(i, 30))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("zktest: server %d at %s not serving after start timeout (last: %v %q); log tail:\n%s",
				m.id, addr, err, out, c.LogTail(i, 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FourLetter sends a ZooKeeper four-letter command ("srvr", "ruok", "mntr",
// "cons", ...) to addr and returns the answer.
func FourLetter(addr, cmd string, timeout time.Duration) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte(cmd)); err != nil {
		return "", err
	}
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			if b.Len() > 0 {
				return b.String(), nil
			}
			return "", err
		}
	}
}

// Size is the number of members.
func (c *Cluster) Size() int { return len(c.members) }

// Addr returns member i's client address, "127.0.0.1:port" (i from 0).
func (c *Cluster) Addr(i int) string {
	return fmt.Sprintf("127.0.0.1:%d", c.members[i].clientPort)
}

// Addrs returns every member's client address.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.members))
	for i := range c.members {
		out[i] = c.Addr(i)
	}
	return out
}

// ConnectString returns the members' addresses joined by commas, as
// zookeeper.address takes them.
func (c *Cluster) ConnectString() string { return strings.Join(c.Addrs(), ",") }

// Mode returns member i's mode as `srvr` reports it ("standalone",
// "leader", "follower"), or "" when it does not serve.
func (c *Cluster) Mode(i int) string {
	out, err := FourLetter(c.Addr(i), "srvr", time.Second)
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Mode: "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Leader returns the index of the ensemble's current leader (or 0 for a
// standalone server), or -1 when no member reports being leader.
func (c *Cluster) Leader() int {
	for i := range c.members {
		switch c.Mode(i) {
		case "leader", "standalone":
			return i
		}
	}
	return -1
}

// Running reports whether member i's process is alive.
func (c *Cluster) Running(i int) bool {
	c.mu.Lock()
	m := c.members[i]
	done := m.done
	c.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Pid is member i's JVM process id, or 0 when it is not running.
func (c *Cluster) Pid(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.members[i].proc; p != nil && p.Process != nil {
		return p.Process.Pid
	}
	return 0
}

// JavaVersion returns the first line of `java -version`, or "" when java
// cannot be run.
func JavaVersion() string {
	j, err := javaPath()
	if err != nil {
		return ""
	}
	out, err := exec.Command(j, "-version").CombinedOutput()
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(line)
}

// Kill sends SIGKILL to member i and waits for it to exit. Killing a
// stopped member does nothing.
func (c *Cluster) Kill(i int) { c.signal(i, syscall.SIGKILL, 0) }

// Stop sends SIGTERM to member i and waits for it to exit (SIGKILL after
// 10s).
func (c *Cluster) Stop(i int) { c.signal(i, syscall.SIGTERM, 10*time.Second) }

func (c *Cluster) signal(i int, sig syscall.Signal, grace time.Duration) {
	c.mu.Lock()
	m := c.members[i]
	proc, done := m.proc, m.done
	c.mu.Unlock()
	if proc == nil || done == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	proc.Process.Signal(sig)
	if grace > 0 {
		select {
		case <-done:
			return
		case <-time.After(grace):
			proc.Process.Kill()
		}
	}
	<-done
}

// Restart starts member i again (after Stop or Kill; a running member is
// killed first) with the same ports and data, and waits until it serves.
// In an ensemble it serves once it has joined a quorum. Errors: the member
// did not come back within the start timeout.
func (c *Cluster) Restart(i int) error {
	c.Kill(i)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errors.New("zktest: cluster closed")
	}
	m := c.members[i]
	c.mu.Unlock()
	if err := c.launch(m); err != nil {
		return err
	}
	return c.waitServing(i, time.Now().Add(c.opts.StartTimeout))
}

// WaitServing waits until member i serves (standalone, or part of a
// quorum) or timeout passes.
func (c *Cluster) WaitServing(i int, timeout time.Duration) error {
	return c.waitServing(i, time.Now().Add(timeout))
}

// LogPath is member i's server log.
func (c *Cluster) LogPath(i int) string { return filepath.Join(c.members[i].dir, "server.log") }

// LogTail returns the last n lines of member i's log.
func (c *Cluster) LogTail(i, n int) string {
	b, err := os.ReadFile(c.LogPath(i))
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (c *Cluster) stopAll() {
	for i := range c.members {
		c.Kill(i)
	}
}

// Close kills every member and removes the data the harness created. It is
// idempotent.
func (c *Cluster) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	c.stopAll()
	if c.ownsDir {
		os.RemoveAll(c.dir)
	}
}

// StartServer starts a standalone server for t and closes it at t's
// cleanup. It skips t when ZooKeeper is not installed (fails it under
// CI=true) and fails t when the server does not start.
func StartServer(t testing.TB) *Cluster {
	t.Helper()
	return StartCluster(t, Options{Servers: 1})
}

// StartEnsemble starts an n-server ensemble for t (see StartServer).
func StartEnsemble(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartCluster(t, Options{Servers: n})
}

// StartCluster starts servers with opts for t (see StartServer). On
// failure of a test the members' log tails are logged.
func StartCluster(t testing.TB, opts Options) *Cluster {
	t.Helper()
	RequireInstalled(t)
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	c, err := start(opts, t.TempDir())
	if err != nil {
		t.Fatalf("start ZooKeeper: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i := range c.members {
				t.Logf("zktest: server %d log tail:\n%s", i+1, c.LogTail(i, 20))
			}
		}
		c.Close()
	})
	return c
}

// RequireInstalled skips t when no ZooKeeper server can be started here
// (fails it under CI=true).
func RequireInstalled(t testing.TB) {
	t.Helper()
	ok, why := Available()
	testutil.RequireOrSkip(t, ok, "ZooKeeper server: %s", why)
}

var (
	sharedMu  sync.Mutex
	shared    *Cluster
	sharedErr error
)

// Shared returns the test process's shared standalone server, starting it
// on first use. Tests that share it must isolate themselves by path (a
// unique root per test, see UniqueRoot). Call CloseShared from TestMain
// after m.Run; the JVM also dies with the process (Pdeathsig). Skips or
// fails t as StartServer does.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	RequireInstalled(t)
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil && sharedErr == nil {
		shared, sharedErr = Start(Options{Servers: 1})
	}
	if sharedErr != nil {
		t.Fatalf("start shared ZooKeeper: %v", sharedErr)
	}
	return shared
}

// CloseShared stops the shared server, if one was started.
func CloseShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		shared.Close()
		shared = nil
	}
	sharedErr = nil
}

var (
	rootMu  sync.Mutex
	rootSeq int
)

// UniqueRoot returns a path like "/t/<test-name>-<n>", unique within the
// test process, to use as a chroot-like root (zookeeper.path.root) so tests
// sharing one server do not see each other's nodes.
func UniqueRoot(t testing.TB) string {
	rootMu.Lock()
	rootSeq++
	n := rootSeq
	rootMu.Unlock()
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, t.Name())
	if len(name) > 80 {
		name = name[len(name)-80:]
	}
	return fmt.Sprintf("/t/%s-%d-%d", name, os.Getpid(), n)
}

// ServerCommand is the java binary and the arguments before the zoo.cfg
// path that start one ZooKeeper server (QuorumPeerMain) as Start does, for
// harnesses that launch servers themselves (internal/netfault runs each in
// a network namespace of its own). Errors: ErrNotInstalled.
func ServerCommand() (string, []string, error) {
	java, err := javaPath()
	if err != nil {
		return "", nil, err
	}
	cp, err := classPath()
	if err != nil {
		return "", nil, err
	}
	return java, []string{"-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-Dorg.slf4j.simpleLogger.showDateTime=true",
		"-Dzookeeper.jmx.log4j.disable=true",
		"-Dzookeeper.admin.enableServer=false",
		"-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain"}, nil
}
