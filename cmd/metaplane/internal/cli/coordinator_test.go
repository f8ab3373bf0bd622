package cli

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/internal/procstat"
	"github.com/metaplane/metaplane/internal/testutil"
)

// TestCoordinatorDefaultRaft runs `metaplane coordinator` with no
// configuration but free ports: it selects the single-voter Raft default,
// keeps its data in ./data, says where it listens, serves the admin verbs,
// and exits cleanly on SIGTERM.
func TestCoordinatorDefaultRaft(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator and its Raft plugin")
	}
	testutil.Binary(t, "metaplane-backend-raft")
	dir := t.TempDir()
	client := strconv.Itoa(testutil.FreePort(t))
	p := startCoordinatorProcess(t, dir, "admin list-tables", "-D", "bind.listeners=CLIENT://127.0.0.1:"+client,
		"-D", "coordinator.raft.port="+strconv.Itoa(testutil.FreePort(t)), "-D", "metrics.address=127.0.0.1:0")
	cmd, done, out := p.cmd, p.done, p.banner
	for _, want := range []string{"backend:  raft (selected by metadata.backend.default=raft)", "voter 1 of 1",
		"data in ./data/raft", "clients:  127.0.0.1:" + client + " (plaintext, unauthenticated", "admin create-database demo --bootstrap-servers 127.0.0.1:" + client} {
		if !strings.Contains(out, want) {
			t.Errorf("banner lacks %q:\n%s", want, out)
		}
	}
	bs := "--bootstrap-servers=127.0.0.1:" + client
	testutil.WaitFor(t, 30*time.Second, "the coordinator serves", func() bool {
		_, _, code := runCLI(t, "admin", "list-databases", bs, "--timeout=2s")
		return code == ExitOK
	})
	for _, args := range [][]string{
		{"admin", "create-database", "demo", bs},
		{"admin", "create-table", "demo.orders", "--column", "id:BIGINT", "--column", "amount:DOUBLE", "--primary-key", "id", "--buckets", "3", bs},
	} {
		if o, e, code := runCLI(t, args...); code != ExitOK {
			t.Fatalf("%v: exit %d\n%s%s", args, code, o, e)
		}
	}
	o, _, code := runCLI(t, "admin", "list-tables", "demo", bs)
	if code != ExitOK || o != "orders\n" {
		t.Fatalf("list-tables: exit %d, %q", code, o)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "raft")); err != nil {
		t.Fatalf("no ./data/raft: %v", err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit within 30s of SIGTERM")
	}
}

// TestDemo runs `metaplane demo` and checks that it completes and leaves no
// process behind.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs five processes")
	}
	bin := testutil.Binary(t, "metaplane")
	testutil.Binary(t, "metaplane-backend-raft")
	cmd := exec.Command(bin, "demo", "--keep")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	m := regexp.MustCompile(`log (/\S+)/coordinator-1\.log`).FindSubmatch(out)
	if m != nil {
		defer os.RemoveAll(string(m[1]))
	}
	if err != nil || !strings.Contains(string(out), "demo complete.") {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range []string{"new leader", "intact: same table id, same schema bytes", "stopped 6 processes", "its buckets re-led"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if m == nil {
		t.Fatalf("no data directory in the output:\n%s", out)
	}
	dir := string(m[1])
	// No process may be left with the demo's directory as its working
	// directory or in its arguments (coordinators, plugins, tablet servers).
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, _ := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if cwd == dir || strings.Contains(string(cmdline), dir) {
			t.Errorf("process %d left behind: %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
}

// TestCoordinatorSurvivesPluginDeath kills the coordinator's Raft plugin
// with SIGKILL: the coordinator restarts it, leads again from the same
// data, and serves the catalog it had.
func TestCoordinatorSurvivesPluginDeath(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator and its Raft plugin")
	}
	bin := testutil.Binary(t, "metaplane")
	testutil.Binary(t, "metaplane-backend-raft")
	client := strconv.Itoa(testutil.FreePort(t))
	cmd := exec.Command(bin, "coordinator", "--no-env", "-D", "bind.listeners=CLIENT://127.0.0.1:"+client,
		"-D", "coordinator.raft.port="+strconv.Itoa(testutil.FreePort(t)), "-D", "metrics.address=127.0.0.1:0")
	cmd.Dir = t.TempDir()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logs := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("coordinator output:\n%s", logs.String())
		}
	}()
	bs := "--bootstrap-servers=127.0.0.1:" + client
	testutil.WaitFor(t, 60*time.Second, "the coordinator serves", func() bool {
		_, _, code := runCLI(t, "admin", "create-database", "kept", "--if-not-exists", bs, "--timeout=2s")
		return code == ExitOK
	})
	plugins := procstat.Children(cmd.Process.Pid)
	if len(plugins) != 1 {
		t.Fatalf("plugin processes: %v", plugins)
	}
	syscall.Kill(plugins[0], syscall.SIGKILL)
	testutil.WaitFor(t, 60*time.Second, "a new plugin process", func() bool {
		now := procstat.Children(cmd.Process.Pid)
		return len(now) == 1 && now[0] != plugins[0]
	})
	testutil.WaitFor(t, 60*time.Second, "the coordinator serves its catalog again", func() bool {
		o, _, code := runCLI(t, "admin", "list-databases", bs, "--timeout=2s")
		return code == ExitOK && o == "kept\n"
	})
	// The restart is counted.
	b := scrapeMetrics(t, logs.String())
	if !strings.Contains(string(b), "metaplane_plugin_restarts_total 1\n") {
		t.Errorf("metrics lack metaplane_plugin_restarts_total 1:\n%s", b)
	}
}

// coordinatorProcess is a `metaplane coordinator` process a test started.
type coordinatorProcess struct {
	cmd    *exec.Cmd
	stderr *testutil.SyncBuffer // the banner and the logs
	banner string               // stderr up to the line the test waited for
	done   chan error           // receives cmd.Wait's result
}

// startCoordinatorProcess runs `metaplane coordinator --no-env args...` in
// dir and waits (up to 60s) for a line on its stderr (banner and logs)
// containing until. The process is killed when the test ends; its stderr
// is logged if the test failed.
func startCoordinatorProcess(t *testing.T, dir, until string, args ...string) *coordinatorProcess {
	t.Helper()
	cmd := exec.Command(testutil.Binary(t, "metaplane"), append([]string{"coordinator", "--no-env"}, args...)...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &coordinatorProcess{cmd: cmd, stderr: &testutil.SyncBuffer{}, done: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	banner := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		seen := false
		for sc.Scan() {
			p.stderr.Write([]byte(sc.Text() + "\n"))
			if !seen && strings.Contains(sc.Text(), until) {
				seen = true
				banner <- p.stderr.String()
			}
		}
		io.Copy(io.Discard, stderr)
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("coordinator stderr:\n%s", p.stderr.String())
		}
	})
	select {
	case p.banner = <-banner:
	case <-time.After(60 * time.Second):
		t.Fatalf("no line %q within 60s; stderr:\n%s", until, p.stderr.String())
	}
	return p
}

// TestCoordinatorBannerNamesThePluginsBackend runs a coordinator with
// --plugin pointing at the memory backend while the configuration selects
// Raft: the banner names the backend that runs (memory, from --plugin) and
// says the configured one's keys are not used, instead of a Raft voter line.
func TestCoordinatorBannerNamesThePluginsBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator and its plugin")
	}
	mem := testutil.Binary(t, "metaplane-backend-memory")
	p := startCoordinatorProcess(t, t.TempDir(), "admin list-tables", "--plugin", mem,
		"-D", "bind.listeners=CLIENT://127.0.0.1:"+strconv.Itoa(testutil.FreePort(t)))
	want := "backend:  memory (plugin " + mem + " from --plugin; the configuration selects raft by metadata.backend.default=raft, and its keys are not used)"
	if !strings.Contains(p.banner, want) {
		t.Errorf("banner lacks %q:\n%s", want, p.banner)
	}
	if strings.Contains(p.banner, "voter 1 of 1") {
		t.Errorf("banner names a Raft voter although the memory backend runs:\n%s", p.banner)
	}
}

// metricsGet answers GET path on the metrics listener of the coordinator
// whose banner (or logs) name it: the status code and the body.
func metricsGet(t *testing.T, banner, path string) (int, []byte) {
	t.Helper()
	m := regexp.MustCompile(`metrics:  http://(\S+)/metrics`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("the coordinator printed no metrics address:\n%s", banner)
	}
	resp, err := http.Get("http://" + m[1] + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// scrapeMetrics reads the metrics of the coordinator whose banner (or
// logs) name its metrics address.
func scrapeMetrics(t *testing.T, banner string) []byte {
	t.Helper()
	_, b := metricsGet(t, banner, "/metrics")
	return b
}

// gogcMetric reads go_gc_gogc_percent from the coordinator whose banner
// names its metrics address.
func gogcMetric(t *testing.T, banner string) int {
	t.Helper()
	b := scrapeMetrics(t, banner)
	v := regexp.MustCompile(`(?m)^go_gc_gogc_percent (\d+)$`).FindSubmatch(b)
	if v == nil {
		t.Fatalf("no go_gc_gogc_percent in the metrics:\n%s", b)
	}
	n, _ := strconv.Atoi(string(v[1]))
	return n
}

// TestCoordinatorGCHeadroom runs coordinators with
// coordinator.memory.gc-headroom far below their live heap: the banner
// says so and the collector's GOGC (go_gc_gogc_percent) is brought below
// Go's default of 100; with GOGC in the environment the key stands aside
// and the runtime keeps the environment's value. The first also serves
// Go's profiles (metrics.pprof), the second, without the key, does not.
func TestCoordinatorGCHeadroom(t *testing.T) {
	if testing.Short() {
		t.Skip("starts coordinators and their plugins")
	}
	mem := testutil.Binary(t, "metaplane-backend-memory")
	p := startCoordinatorProcess(t, t.TempDir(), "admin list-tables", "--plugin", mem,
		"-D", "bind.listeners=CLIENT://127.0.0.1:"+strconv.Itoa(testutil.FreePort(t)),
		"-D", "metrics.address=127.0.0.1:0", "-D", "coordinator.memory.gc-headroom=64kb", "-D", "metrics.pprof=true")
	if want := "memory:   the Go heap is collected once it grows 64kb above its live size"; !strings.Contains(p.banner, want) {
		t.Errorf("banner lacks %q:\n%s", want, p.banner)
	}
	// A coordinator's live heap is megabytes: 64kb of it is under a
	// tenth, so the tuner sets the floor once it has read the heap.
	var v int
	testutil.WaitFor(t, 30*time.Second, "GOGC at the tuner's floor", func() bool {
		v = gogcMetric(t, p.banner)
		return v < 100
	})
	if v != 10 {
		t.Errorf("go_gc_gogc_percent %d, want 10 (the floor: 64kb is less than a tenth of the live heap)", v)
	}
	heap := func(banner string) (int, string) {
		code, b := metricsGet(t, banner, "/debug/pprof/heap?debug=1")
		return code, string(b)
	}
	if !strings.Contains(p.banner, "pprof:    http://") {
		t.Errorf("banner names no pprof address with metrics.pprof=true:\n%s", p.banner)
	}
	if code, body := heap(p.banner); code != http.StatusOK || !strings.Contains(body, "heap profile:") {
		t.Errorf("/debug/pprof/heap with metrics.pprof=true: %d\n%.200s", code, body)
	}

	t.Setenv("GOGC", "50")
	q := startCoordinatorProcess(t, t.TempDir(), "admin list-tables", "--plugin", mem,
		"-D", "bind.listeners=CLIENT://127.0.0.1:"+strconv.Itoa(testutil.FreePort(t)),
		"-D", "metrics.address=127.0.0.1:0", "-D", "coordinator.memory.gc-headroom=64kb")
	if want := "memory:   the collector as GOGC=50 says (coordinator.memory.gc-headroom not used)"; !strings.Contains(q.banner, want) {
		t.Errorf("banner lacks %q:\n%s", want, q.banner)
	}
	if v := gogcMetric(t, q.banner); v != 50 {
		t.Errorf("with GOGC=50 in the environment go_gc_gogc_percent is %d", v)
	}
	if code, _ := heap(q.banner); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/heap without metrics.pprof: %d, want 404", code)
	}
}
