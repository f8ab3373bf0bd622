package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

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
	var rep conformanceReport
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
