package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/internal/zktest"
)

var (
	brokenOnce sync.Once
	brokenPath string
	brokenErr  error
)

// brokenPlugin builds testdata/brokenplugin: a plugin whose Children lists
// nothing.
func brokenPlugin(t *testing.T) string {
	t.Helper()
	brokenOnce.Do(func() {
		dir, err := filepath.Abs(filepath.Join("testdata", "brokenplugin"))
		if err != nil {
			brokenErr = err
			return
		}
		// Built once per test process, so not into a test's TempDir (gone
		// when that test ends, while -count=N runs the tests again).
		binDir, err := os.MkdirTemp("", "metaplane-cli-test-")
		if err != nil {
			brokenErr = err
			return
		}
		brokenPath = filepath.Join(binDir, "metaplane-backend-broken")
		out, err := exec.Command("go", "build", "-o", brokenPath, dir).CombinedOutput()
		if err != nil {
			brokenErr = err
			brokenPath = string(out)
		}
	})
	if brokenErr != nil {
		t.Fatalf("build the broken plugin: %v\n%s", brokenErr, brokenPath)
	}
	return brokenPath
}

func TestConformanceMemoryPlugin(t *testing.T) {
	bin := testutil.Binary(t, "metaplane-backend-memory")
	out, errOut, code := runCLI(t, "conformance", "--plugin", bin, "--run", "^(Read|Session)/", "--no-env")
	if code != ExitOK {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "conformance of "+bin) {
		t.Errorf("first line %q", lines[0])
	}
	pass := 0
	for _, l := range lines[1 : len(lines)-1] {
		switch {
		case strings.HasPrefix(l, "PASS Read/") || strings.HasPrefix(l, "PASS Session/"):
			pass++
			if !strings.HasSuffix(l, "ms)") && !strings.HasSuffix(l, "s)") {
				t.Errorf("PASS line without a duration: %q", l)
			}
		case strings.HasPrefix(l, "SKIP "):
		default:
			t.Errorf("unexpected line %q", l)
		}
	}
	if pass == 0 {
		t.Errorf("no property passed:\n%s", out)
	}
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "conformance: ") || !strings.Contains(last, " 0 failed") {
		t.Errorf("summary %q", last)
	}
}

func TestConformanceJSON(t *testing.T) {
	bin := testutil.Binary(t, "metaplane-backend-memory")
	out, errOut, code := runCLI(t, "conformance", "--plugin", bin, "--run", "^Read/", "--json", "--no-env")
	if code != ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	// The --json report (metaplane-lab's conformance verb, run for this
	// command line by metaplane).
	var rep struct {
		Backend                 string
		Passed, Failed, Skipped int
		Results                 []struct{ Name string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if rep.Backend != "memory" || rep.Passed == 0 || rep.Failed != 0 || len(rep.Results) != rep.Passed+rep.Skipped {
		t.Errorf("report %+v", rep)
	}
	for _, r := range rep.Results {
		if !strings.HasPrefix(r.Name, "Read/") {
			t.Errorf("--run ^Read/ ran %q", r.Name)
		}
	}
}

// TestConformanceFailure: a broken plugin's failures are reported one line
// each and the exit status is 1; its own configuration keys (under its
// selector key's section) are accepted.
func TestConformanceFailure(t *testing.T) {
	bin := brokenPlugin(t)
	out, errOut, code := runCLI(t, "conformance", "--plugin", bin, "--run", "^Read/Children", "--no-env", "-D", "broken.endpoints=127.0.0.1:1")
	if code != ExitFailure {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "\nFAIL Read/Children") {
		t.Errorf("no FAIL line:\n%s", out)
	}
	if !strings.Contains(out, "conformance: ") || strings.Contains(out, " 0 failed") {
		t.Errorf("summary does not count the failures:\n%s", out)
	}
}

func TestConformanceUsage(t *testing.T) {
	bin := testutil.Binary(t, "metaplane-backend-memory")
	for _, tt := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no plugin", []string{"conformance"}, ExitUsage, "--plugin PATH is required"},
		{"missing plugin", []string{"conformance", "--plugin", "/nonexistent/metaplane-backend-x"}, ExitUsage, "/nonexistent/metaplane-backend-x"},
		{"stray argument", []string{"conformance", "--plugin", bin, "extra"}, ExitUsage, `unexpected argument "extra"`},
		{"bad regex", []string{"conformance", "--plugin", bin, "--run", "(", "--no-env"}, ExitUsage, "bad --run expression"},
		{"no match", []string{"conformance", "--plugin", bin, "--run", "^NoSuchProperty$", "--no-env"}, ExitUsage, "matches no property"},
		{"scale below 1", []string{"conformance", "--plugin", bin, "--timeout-scale", "0.5", "--no-env"}, ExitUsage, "--timeout-scale 0.5: must be at least 1"},
		{"bad config", []string{"conformance", "--plugin", bin, "--no-env", "-D", "coordinator.raft.port=banana"}, ExitUsage, "coordinator.raft.port"},
		{"not a plugin", []string{"conformance", "--plugin", "/bin/true", "--no-env"}, ExitFailure, "describe plugin /bin/true"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := runCLI(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, errOut)
			}
			if !strings.Contains(errOut, tt.want) {
				t.Errorf("stderr %q does not mention %q", errOut, tt.want)
			}
		})
	}
}

// TestConformanceZooKeeperPlugin points the shipped ZooKeeper plugin at a
// real server with -D, each store under its own chroot (--unique).
func TestConformanceZooKeeperPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a ZooKeeper server; skipped with -short")
	}
	srv := zktest.StartServer(t)
	bin := testutil.Binary(t, "metaplane-backend-zookeeper")
	out, errOut, code := runCLI(t, "conformance", "--plugin", bin, "--no-env",
		"--run", "^(Create|Read|Session/Ephemeral)/",
		"-D", "zookeeper.address="+srv.ConnectString(),
		"-D", "zookeeper.path.root=/cli-conformance",
		"-D", "zookeeper.client.session-timeout=4s",
		"--unique", "zookeeper.path.root")
	if code != ExitOK {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, `(backend "zookeeper")`) || !strings.Contains(out, "PASS Create/Persistent/ReadBack") || !strings.Contains(out, " 0 failed") {
		t.Errorf("output:\n%s", out)
	}
	_, errOut, code = runCLI(t, "conformance", "--plugin", bin, "--no-env", "--unique", "no.such.key")
	if code != ExitUsage || !strings.Contains(errOut, "no.such.key") {
		t.Errorf("--unique of an unknown key: exit %d, stderr %q", code, errOut)
	}
}

func TestConformanceList(t *testing.T) {
	out, errOut, code := runCLI(t, "conformance", "--list", "--run", "^Watch/")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		t.Fatalf("too few properties:\n%s", out)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "Watch/") || !strings.Contains(l, ": ") {
			t.Errorf("line %q", l)
		}
	}
	if !strings.Contains(out, "[needs ") {
		t.Errorf("no property lists what it needs:\n%s", out)
	}
}

// TestConformanceHungPlugin: a plugin whose Children never returns (it
// ignores its context) fails each property that calls it once the
// property's deadline (scaled: 1s times 2) passes, naming the call it was
// waiting in, and the run goes on to the next property and ends.
func TestConformanceHungPlugin(t *testing.T) {
	bin := brokenPlugin(t)
	out, errOut, code := runCLI(t, "conformance", "--plugin", bin, "--no-env",
		"--run", "^(Read/Children/Sorted|Read/Children/NotFound|Read/Exists)$",
		"--property-timeout", "1s", "--timeout-scale", "2",
		"-D", "broken.endpoints=127.0.0.1:1", "-D", "broken.hang=true")
	if code != ExitFailure {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, name := range []string{"Read/Children/Sorted", "Read/Children/NotFound"} {
		line := lineWithPrefix(out, "FAIL "+name+":")
		if line == "" {
			t.Errorf("no FAIL line for %s:\n%s", name, out)
			continue
		}
		if !strings.Contains(line, "timed out after 2s, waiting in: plugins.(*Client).Children (client.go:") {
			t.Errorf("%s: the failure does not name the call it waited in:\n%s", name, out)
		}
	}
	if lineWithPrefix(out, "PASS Read/Exists ") == "" {
		t.Errorf("the run did not go on to Read/Exists:\n%s", out)
	}
	if !strings.Contains(out, "conformance: 1 passed, 2 failed, 0 skipped\n") {
		t.Errorf("summary:\n%s", out)
	}
}

func lineWithPrefix(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// TestConformanceSignalStopsRun sends a real SIGINT (and SIGTERM) to a
// real `metaplane conformance` process whose plugin hangs, under a
// property deadline far beyond the test's: the process stops, prints the
// interrupted property's failure and the summary, exits 1, and the plugin
// process is gone.
func TestConformanceSignalStopsRun(t *testing.T) {
	metaplane := testutil.Binary(t, "metaplane")
	bin := brokenPlugin(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "plugin.pid")
			cmd := exec.Command(metaplane, "conformance", "--plugin", bin, "--no-env",
				"--run", "^Read/Children/Sorted$", "--property-timeout", "1h",
				"-D", "broken.endpoints=127.0.0.1:1", "-D", "broken.hang=true", "-D", "broken.pidfile="+pidFile)
			// Files, not pipes: Wait must not wait for a plugin that
			// inherited them.
			stdout, stderr := &fileOutput{t: t}, &fileOutput{t: t}
			cmd.Stdout, cmd.Stderr = stdout.file(), stderr.file()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var waitErr error
			exited := make(chan struct{})
			go func() { waitErr = cmd.Wait(); close(exited) }()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				select {
				case <-exited:
				case <-time.After(30 * time.Second):
					t.Errorf("metaplane conformance not reaped 30s after SIGKILL")
				}
			})
			var pid int
			testutil.WaitFor(t, 30*time.Second, "the plugin to start", func() bool {
				b, err := os.ReadFile(pidFile)
				if err != nil {
					return false
				}
				pid, err = strconv.Atoi(string(b))
				return err == nil
			})
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-exited:
			case <-time.After(60 * time.Second):
				t.Fatalf("metaplane conformance still running 60s after %v\nstdout:\n%s", sig, stdout.String())
			}
			var ee *exec.ExitError
			if !errors.As(waitErr, &ee) || ee.ExitCode() != ExitFailure {
				t.Errorf("exit: %v, want status 1\nstderr:\n%s", waitErr, stderr.String())
			}
			out := stdout.String()
			if !strings.Contains(out, "FAIL Read/Children/Sorted: ") || !strings.Contains(out, "interrupted") {
				t.Errorf("no FAIL line for the interrupted property:\n%s", out)
			}
			if !strings.Contains(out, "conformance: 0 passed, 1 failed, 0 skipped\n") {
				t.Errorf("no summary:\n%s", out)
			}
			if !strings.Contains(stderr.String(), "conformance: interrupted") {
				t.Errorf("stderr does not say the run was interrupted:\n%s", stderr.String())
			}
			testutil.WaitFor(t, 30*time.Second, "the plugin process to be gone", func() bool { return processGone(pid) })
		})
	}
}

// processGone reports whether pid no longer runs (absent, or a zombie
// nobody has reaped yet).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) != nil
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}

// fileOutput is a child process's output in a temporary file.
type fileOutput struct {
	t *testing.T
	f *os.File
}

func (o *fileOutput) file() *os.File {
	f, err := os.CreateTemp(o.t.TempDir(), "out")
	if err != nil {
		o.t.Fatal(err)
	}
	o.t.Cleanup(func() { f.Close() })
	o.f = f
	return f
}

func (o *fileOutput) String() string {
	b, err := os.ReadFile(o.f.Name())
	if err != nil {
		o.t.Fatal(err)
	}
	return string(b)
}

// TestConformanceNameMismatch: the broken plugin's descriptor names it
// "broken" while its backend's capabilities say "memory": the suite,
// knowing the descriptor, fails it.
func TestConformanceNameMismatch(t *testing.T) {
	bin := brokenPlugin(t)
	out, errOut, code := runCLI(t, "conformance", "--plugin", bin, "--no-env", "--run", "^Capabilities/", "-D", "broken.endpoints=127.0.0.1:1")
	if code != ExitFailure {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if lineWithPrefix(out, "FAIL Capabilities/MatchDescriptor:") == "" || !strings.Contains(out, `Capabilities().Name is "memory" but the descriptor names the backend "broken"`) {
		t.Errorf("no failure naming both names:\n%s", out)
	}
	if lineWithPrefix(out, "PASS Capabilities/Stable ") == "" {
		t.Errorf("Capabilities/Stable did not pass:\n%s", out)
	}
}
