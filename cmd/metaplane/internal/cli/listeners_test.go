package cli

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/daemon"
	"github.com/metaplane/metaplane/internal/testutil"
)

// TestCoordinatorFromOriginalServerYAML starts a coordinator from a
// server.yaml in the original system's style (one listener named FLUSS,
// internal.listener.name, data.dir) with log.format json: it serves the
// admin verbs on that listener, keeps its Raft state under data.dir, and
// every line on its stderr, its plugin's included, is one JSON object with
// one time, a level and a message; the shutdown is logged. A tablet server
// configured by bind.listeners binds and registers that listener (JSON
// logs too).
func TestCoordinatorFromOriginalServerYAML(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator and its Raft plugin")
	}
	testutil.Binary(t, "metaplane-backend-raft")
	dir := t.TempDir()
	client := strconv.Itoa(testutil.FreePort(t))
	yaml := "bind.listeners: FLUSS://127.0.0.1:" + client + "\n" +
		"internal.listener.name: FLUSS\n" +
		"data.dir: ./state\n" +
		"coordinator.raft.port: " + strconv.Itoa(testutil.FreePort(t)) + "\n" +
		"metrics.address: 127.0.0.1:0\n" +
		"log.format: json\n"
	if err := os.WriteFile(filepath.Join(dir, "server.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startCoordinatorProcess(t, dir, `"msg":"coordinator started"`, "--config", "server.yaml")
	for _, want := range []string{`"listener":"FLUSS"`, `"clients":"127.0.0.1:` + client + `"`, `"listener_chosen_by":"the only entry of bind.listeners"`, `"raft_dir":"./state/raft"`} {
		if !strings.Contains(p.banner, want) {
			t.Errorf("start-up line lacks %s:\n%s", want, p.banner)
		}
	}
	bs := "--bootstrap-servers=127.0.0.1:" + client
	testutil.WaitFor(t, 30*time.Second, "the coordinator serves", func() bool {
		_, _, code := runCLI(t, "admin", "create-database", "legacy", "--if-not-exists", bs, "--timeout=2s")
		return code == ExitOK
	})
	if o, e, code := runCLI(t, "admin", "list-databases", bs); code != ExitOK || o != "legacy\n" {
		t.Fatalf("list-databases: exit %d, %q %s", code, o, e)
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "raft")); err != nil {
		t.Errorf("no Raft state under data.dir: %v", err)
	}

	// A tablet server binds the client listener of its bind.listeners and
	// registers it; with no seed list it would dial 127.0.0.1:9123, so it
	// is given the coordinator.
	tsPort := strconv.Itoa(testutil.FreePort(t))
	ts, tsErr, tsDone := startTabletServerProcess(t, "--id", "7", "--log-format", "json",
		"-D", "coordinator.seed.nodes=127.0.0.1:"+client, "-D", "bind.listeners=FLUSS://127.0.0.1:"+tsPort)
	testutil.WaitFor(t, 30*time.Second, "the tablet server registers", func() bool {
		o, _, code := runCLI(t, "admin", "list-tablet-servers", bs, "--timeout=2s")
		return code == ExitOK && strings.Contains(o, "FLUSS://127.0.0.1:"+tsPort)
	})
	ts.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-tsDone:
		if err != nil {
			t.Errorf("tablet server exit after SIGTERM: %v\n%s", err, tsErr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the tablet server did not exit within 30s of SIGTERM")
	}
	checkJSONLines(t, "tablet server", tsErr.String(), []string{"tablet server started", "tablet server stopped"}, false)

	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit within 30s of SIGTERM")
	}
	checkJSONLines(t, "coordinator", p.stderr.String(), []string{"coordinator started", "elected leader",
		"resigning leadership at shutdown", "plugin stopped", "coordinator stopped"}, true)
}

// checkJSONLines parses every line of logs as one JSON object with exactly
// one of each of time (RFC 3339), level and msg, and at most one plugin
// and no second time field; msgs must all appear, and with plugin, some
// line must come from a plugin.
func checkJSONLines(t *testing.T, what, logs string, msgs []string, plugin bool) {
	t.Helper()
	seen := map[string]map[string]any{}
	fromPlugin := 0
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		n++
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("%s: line %d is not a JSON object: %v\n%s", what, n, err, line)
			continue
		}
		for _, k := range []string{`"time":`, `"level":`, `"msg":`} {
			if c := strings.Count(line, k); c != 1 {
				t.Errorf("%s: line %d has %s %d times: %s", what, n, k, c, line)
			}
		}
		if c := strings.Count(line, `"plugin":`); c > 1 {
			t.Errorf("%s: line %d names the plugin %d times: %s", what, n, c, line)
		} else if c == 1 {
			fromPlugin++
		}
		if _, ok := m["timestamp"]; ok {
			t.Errorf("%s: line %d has a second time field: %s", what, n, line)
		}
		if s, _ := m["time"].(string); s != "" {
			if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
				t.Errorf("%s: line %d: time %q: %v", what, n, s, err)
			}
		}
		if msg, _ := m["msg"].(string); msg != "" {
			seen[msg] = m
		}
	}
	if n == 0 {
		t.Fatalf("%s logged nothing", what)
	}
	for _, msg := range msgs {
		if seen[msg] == nil {
			t.Errorf("%s: no line with msg %q:\n%s", what, msg, logs)
		}
	}
	if stop := seen[what+" stopped"]; stop != nil && !strings.Contains(stop["reason"].(string), "terminated") {
		t.Errorf("%s: stop line %v: want the reason (SIGTERM)", what, stop)
	}
	if plugin && fromPlugin == 0 {
		t.Errorf("%s: no line from the plugin:\n%s", what, logs)
	}
}

// TestListenerRefusals: several listeners that internal.listener.name does
// not tell apart are refused naming both keys, before anything starts; a
// tablet server whose bind.listeners port is taken refuses naming the key,
// and --listen overrides bind.listeners.
func TestListenerRefusals(t *testing.T) {
	_, e, code := runCLI(t, "coordinator", "--no-env", "-D", "bind.listeners=EXTERNAL://127.0.0.1:0,REPLICATION://127.0.0.1:0")
	if code != ExitFailure || !strings.Contains(e, "client.listener.name: required: bind.listeners lists 2 listeners (EXTERNAL, REPLICATION)") ||
		!strings.Contains(e, "internal.listener.name=FLUSS") {
		t.Errorf("ambiguous listeners: exit %d, stderr:\n%s", code, e)
	}
	_, e, code = runCLI(t, "tablet-server", "--no-env", "--id", "1", "-D", "bind.listeners=EXTERNAL://127.0.0.1:0,REPLICATION://127.0.0.1:0")
	if code != ExitFailure || !strings.Contains(e, "client.listener.name: required") {
		t.Errorf("ambiguous listeners, tablet server: exit %d, stderr:\n%s", code, e)
	}

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, e, code = runCLI(t, "tablet-server", "--no-env", "--id", "1", "-D", "bind.listeners=FLUSS://"+busy.Addr().String())
	if code != ExitFailure || !strings.Contains(e, "bind.listeners: listen on "+busy.Addr().String()+" (listener FLUSS)") ||
		!strings.Contains(e, `msg="tablet server exiting"`) {
		t.Errorf("taken port: exit %d, stderr:\n%s", code, e)
	}

	// --listen wins over bind.listeners; with no seed nodes the tablet
	// server follows the default coordinator, not its own listener. With
	// --quiet its start line is a log line.
	free := strconv.Itoa(testutil.FreePort(t))
	_, tsErr, _ := startTabletServerProcess(t, "--id", "2", "--quiet", "--listen", "127.0.0.1:"+free,
		"-D", "bind.listeners=FLUSS://"+busy.Addr().String())
	want := []string{`msg="tablet server started"`, "listening=127.0.0.1:" + free, "registered=FLUSS://127.0.0.1:" + free,
		`following="coordinators ` + daemon.DefaultCoordinator + " over plaintext"}
	testutil.WaitFor(t, 30*time.Second, "the tablet server's start line", func() bool {
		for _, w := range want {
			if !strings.Contains(tsErr.String(), w) {
				return false
			}
		}
		return true
	})
	if strings.Contains(tsErr.String(), "metaplane tablet-server 2 listening on") {
		t.Errorf("--quiet printed the banner:\n%s", tsErr.String())
	}
}

// startTabletServerProcess runs `metaplane tablet-server --no-env args...`
// in a temporary directory, killed when the test ends. It returns the
// process, its stderr (start line and logs) and a channel that receives
// cmd.Wait's result.
func startTabletServerProcess(t *testing.T, args ...string) (*exec.Cmd, *testutil.SyncBuffer, chan error) {
	t.Helper()
	ts := exec.Command(testutil.Binary(t, "metaplane"), append([]string{"tablet-server", "--no-env"}, args...)...)
	ts.Dir = t.TempDir()
	ts.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr := &testutil.SyncBuffer{}
	ts.Stderr = stderr
	if err := ts.Start(); err != nil {
		t.Fatal(err)
	}
	done, exited := make(chan error, 1), make(chan struct{})
	go func() { done <- ts.Wait(); close(exited) }()
	t.Cleanup(func() {
		ts.Process.Kill()
		<-exited
	})
	return ts, stderr, done
}
