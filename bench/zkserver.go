package bench

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// zkServer is a ZooKeeper server (standalone or an ensemble) from Debian's
// `zookeeper` package, started for the benchmark on loopback. Unlike the
// test harness it runs with ZooKeeper's production defaults for
// durability (forceSync=yes: every transaction is fsynced before it is
// acknowledged) and a normal JIT, so the comparison with Raft is fair.
type zkServer struct {
	dir     string
	members []*zkMember
}

type zkMember struct {
	id         int
	clientPort int
	dir        string
	cmd        *exec.Cmd
	done       chan struct{}
}

// zkClassPath is the class path of the server: METAPLANE_ZK_CLASSPATH, or
// Debian's jars and configuration directory.
func zkClassPath() (string, error) {
	if cp := os.Getenv("METAPLANE_ZK_CLASSPATH"); cp != "" {
		return cp, nil
	}
	if _, err := os.Stat("/usr/share/java/zookeeper.jar"); err != nil {
		return "", errors.New("ZooKeeper server not installed: /usr/share/java/zookeeper.jar missing (run scripts/ensure-test-deps.sh, or apt-get install zookeeper)")
	}
	return "/usr/share/java/*:/etc/zookeeper/conf", nil
}

func javaBinary() (string, error) {
	if j := os.Getenv("METAPLANE_JAVA"); j != "" {
		return j, nil
	}
	p, err := exec.LookPath("java")
	if err != nil {
		return "", errors.New("java not found on PATH (run scripts/ensure-test-deps.sh, or apt-get install default-jre-headless)")
	}
	return p, nil
}

// javaVersion returns the first line of `java -version`, or "".
func javaVersion() string {
	j, err := javaBinary()
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

func loopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startZooKeeper starts n servers (1: standalone) under dir, with tickTime
// tick, and waits until every one serves.
func startZooKeeper(dir string, n int, tick time.Duration) (*zkServer, error) {
	java, err := javaBinary()
	if err != nil {
		return nil, err
	}
	cp, err := zkClassPath()
	if err != nil {
		return nil, err
	}
	s := &zkServer{dir: dir}
	peer := make([][2]int, n)
	for i := 0; i < n; i++ {
		m := &zkMember{id: i + 1, dir: filepath.Join(dir, fmt.Sprintf("zk%d", i+1))}
		if m.clientPort, err = loopbackPort(); err != nil {
			return nil, err
		}
		if n > 1 {
			if peer[i][0], err = loopbackPort(); err != nil {
				return nil, err
			}
			if peer[i][1], err = loopbackPort(); err != nil {
				return nil, err
			}
		}
		s.members = append(s.members, m)
	}
	for _, m := range s.members {
		data := filepath.Join(m.dir, "data")
		if err := os.MkdirAll(data, 0o755); err != nil {
			return nil, err
		}
		var b strings.Builder
		fmt.Fprintf(&b, "tickTime=%d\ninitLimit=20\nsyncLimit=10\n", tick.Milliseconds())
		fmt.Fprintf(&b, "dataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n", data, m.clientPort)
		fmt.Fprintf(&b, "minSessionTimeout=%d\nmaxSessionTimeout=60000\n", 2*tick.Milliseconds())
		b.WriteString("admin.enableServer=false\n4lw.commands.whitelist=srvr,ruok,mntr\nmaxClientCnxns=0\n")
		// forceSync is left at its default (yes): durable like Raft.
		if n > 1 {
			b.WriteString("standaloneEnabled=false\nreconfigEnabled=false\n")
			for i := range s.members {
				fmt.Fprintf(&b, "server.%d=127.0.0.1:%d:%d\n", i+1, peer[i][0], peer[i][1])
			}
			if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(m.id)+"\n"), 0o644); err != nil {
				return nil, err
			}
		}
		cfg := filepath.Join(m.dir, "zoo.cfg")
		if err := os.WriteFile(cfg, []byte(b.String()), 0o644); err != nil {
			return nil, err
		}
		logf, err := os.Create(filepath.Join(m.dir, "server.log"))
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(java, "-Xmx1g", "-Dzookeeper.admin.enableServer=false",
			"-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg)
		cmd.Dir = m.dir
		cmd.Stdout, cmd.Stderr = logf, logf
		// The server dies with the bench, even on SIGKILL.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		if err := cmd.Start(); err != nil {
			logf.Close()
			s.Close()
			return nil, fmt.Errorf("start ZooKeeper server %d: %w", m.id, err)
		}
		m.cmd, m.done = cmd, make(chan struct{})
		go func(m *zkMember, f *os.File) {
			m.cmd.Wait()
			f.Close()
			close(m.done)
		}(m, logf)
	}
	deadline := time.Now().Add(90 * time.Second)
	for _, m := range s.members {
		if err := m.waitServing(deadline); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

func (m *zkMember) addr() string { return fmt.Sprintf("127.0.0.1:%d", m.clientPort) }

func (m *zkMember) waitServing(deadline time.Time) error {
	for {
		if out, err := fourLetter(m.addr(), "srvr"); err == nil && strings.Contains(out, "Mode: ") {
			return nil
		}
		select {
		case <-m.done:
			return fmt.Errorf("ZooKeeper server %d exited during start-up; log tail:\n%s", m.id, tailFile(filepath.Join(m.dir, "server.log"), 20))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ZooKeeper server %d at %s not serving after 90s; log tail:\n%s", m.id, m.addr(), tailFile(filepath.Join(m.dir, "server.log"), 20))
		}
	}
}

func fourLetter(addr, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(cmd)); err != nil {
		return "", err
	}
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String(), nil
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ConnectString is the servers' addresses, comma-separated.
func (s *zkServer) ConnectString() string {
	var a []string
	for _, m := range s.members {
		a = append(a, m.addr())
	}
	return strings.Join(a, ",")
}

// processes lists the server JVMs for the memory profile.
func (s *zkServer) processes() []ProcessMemory {
	var out []ProcessMemory
	for _, m := range s.members {
		if m.cmd != nil && m.cmd.Process != nil {
			out = append(out, ProcessMemory{Backend: ZooKeeper, Role: fmt.Sprintf("ZooKeeper server %d (JVM)", m.id), PID: m.cmd.Process.Pid})
		}
	}
	return out
}

// Close kills every server and waits for it to exit.
func (s *zkServer) Close() error {
	for _, m := range s.members {
		if m.cmd != nil && m.cmd.Process != nil {
			m.cmd.Process.Kill()
			select {
			case <-m.done:
			case <-time.After(10 * time.Second):
			}
		}
	}
	return nil
}
