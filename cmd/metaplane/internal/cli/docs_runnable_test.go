package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/internal/testutil"
)

// A fenced block whose info string is `sh runnable` (docs/README.md) is run
// by TestDocsRunnableBlocks. Lines starting with "$ " are commands (a line
// ending in "\" continues on the next); the lines after a command, up to
// the next, are output it must print, in that order (other lines may come
// between them). A block without "$ " lines is one command per line. The
// option `any-output` (`sh runnable any-output`) skips the output check,
// for output that differs from run to run (ids, times, placement).
type docCommand struct {
	line int
	cmd  string
	want []string
	any  bool
}

var fenceRE = regexp.MustCompile("^```(.*)$")

// runnableCommands returns the commands of the runnable blocks of a doc.
func runnableCommands(t *testing.T, path string) []docCommand {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []docCommand
	var in, runnable, any, dollar bool
	var cont string
	for i, line := range strings.Split(string(b), "\n") {
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			if in {
				in = false
				continue
			}
			in = true
			f := strings.Fields(m[1])
			runnable = len(f) >= 2 && f[0] == "sh" && f[1] == "runnable"
			any = runnable && len(f) == 3 && f[2] == "any-output"
			if runnable && len(f) > 2 && !any {
				t.Errorf("%s:%d: unknown option in %q", path, i+1, m[1])
			}
			dollar = false
			continue
		}
		if !in || !runnable {
			continue
		}
		if cont != "" {
			cont += "\n" + line
			if !strings.HasSuffix(line, "\\") {
				out[len(out)-1].cmd, cont = cont, ""
			}
			continue
		}
		switch {
		case strings.HasPrefix(line, "$ "):
			dollar = true
			out = append(out, docCommand{line: i + 1, cmd: strings.TrimPrefix(line, "$ "), any: any})
		case dollar:
			if len(out) > 0 && strings.TrimSpace(line) != "" {
				out[len(out)-1].want = append(out[len(out)-1].want, strings.TrimRight(line, " "))
			}
			continue
		case strings.TrimSpace(line) != "":
			out = append(out, docCommand{line: i + 1, cmd: line, any: true})
		default:
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cont = out[len(out)-1].cmd
		}
	}
	return out
}

// docsEnv is the environment the doc commands run in: no METAPLANE_*
// variable of the test's, and dir/bin (the built binaries) first on PATH,
// so both `metaplane` and `bin/metaplane` name them.
func docsEnv(dir string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "METAPLANE_") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	return append(env, "PATH="+filepath.Join(dir, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// adminCallRE finds the metaplane verbs that talk to a coordinator.
var adminCallRE = regexp.MustCompile(`(^|[;&|]\s*)((?:bin/)?metaplane (?:admin|raft))\b`)

// TestDocsRunnableBlocks runs the runnable blocks of the operator docs
// against a real coordinator (a single Raft voter on free loopback ports;
// for admin.md with two tablet servers, ids 1 and 2, as its examples
// show). The admin and raft verbs get --bootstrap-servers of that
// coordinator, and 127.0.0.1:9123 (the default client address) becomes its
// address. A command that fails, or does not print what the doc shows,
// fails the test.
func TestDocsRunnableBlocks(t *testing.T) {
	root := repoRoot(t)
	bin := filepath.Dir(testutil.Binary(t, "metaplane"))
	testutil.Binary(t, "metaplane-backend-raft") // the coordinator's plugin, beside it
	for _, doc := range []struct {
		file          string
		tabletServers int
	}{
		{"getting-started.md", 0},
		{"admin.md", 2},
		{"configuration.md", 0},
	} {
		t.Run(doc.file, func(t *testing.T) {
			cmds := runnableCommands(t, filepath.Join(root, "docs", doc.file))
			if len(cmds) == 0 {
				t.Fatalf("docs/%s has no runnable block", doc.file)
			}
			dir := t.TempDir()
			if err := os.Symlink(bin, filepath.Join(dir, "bin")); err != nil {
				t.Fatal(err)
			}
			env := docsEnv(dir)
			addr := ""
			for _, c := range cmds {
				cmd := c.cmd
				if adminCallRE.MatchString(cmd) {
					if addr == "" {
						addr = startDocsCoordinator(t, dir, doc.tabletServers)
					}
					cmd = strings.ReplaceAll(cmd, "127.0.0.1:9123", addr)
					if !strings.Contains(cmd, "--bootstrap-servers") {
						cmd = adminCallRE.ReplaceAllString(cmd, "${1}${2} --bootstrap-servers="+addr)
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				sh := exec.CommandContext(ctx, "sh", "-c", cmd)
				sh.Dir, sh.Env = dir, env
				var stdout, stderr bytes.Buffer
				sh.Stdout, sh.Stderr = &stdout, &stderr
				err := sh.Run()
				cancel()
				if err != nil {
					t.Fatalf("docs/%s:%d: %s\nran: %s\nfailed: %v\nstdout:\n%s\nstderr:\n%s", doc.file, c.line, c.cmd, cmd, err, stdout.String(), stderr.String())
				}
				if c.any {
					continue
				}
				got := strings.Split(stdout.String(), "\n")
				for i := range got {
					if addr != "" {
						got[i] = strings.ReplaceAll(got[i], addr, "127.0.0.1:9123")
					}
					got[i] = strings.TrimRight(got[i], " ")
				}
				j := 0
				for _, w := range c.want {
					for j < len(got) && got[j] != w {
						j++
					}
					if j == len(got) {
						t.Errorf("docs/%s:%d: %s\nthe doc shows the line\n\t%s\nwhich the output lacks (or has out of order):\n%s", doc.file, c.line, c.cmd, w, stdout.String())
						break
					}
					j++
				}
			}
		})
	}
}

// startDocsCoordinator starts a coordinator (and n tablet servers) for the
// docs and returns its client address.
func startDocsCoordinator(t *testing.T, dir string, n int) string {
	t.Helper()
	bs, _ := coordinatorProc(t, dir, "-D", "coordinator.raft.port="+strconv.Itoa(testutil.FreePort(t)),
		"-D", "coordinator.raft.dir="+filepath.Join(dir, "coordinator-raft"))
	addr := strings.TrimPrefix(bs, "--bootstrap-servers=")
	for id := 1; id <= n; id++ {
		startTabletServerProcess(t, "--id", strconv.Itoa(id), "-D", "coordinator.seed.nodes="+addr)
	}
	if n > 0 {
		testutil.WaitFor(t, 60*time.Second, strconv.Itoa(n)+" tablet servers registered", func() bool {
			out, _, code := runCLI(t, "admin", "list-tablet-servers", bs, "--timeout=2s")
			return code == ExitOK && len(strings.Split(strings.TrimSpace(out), "\n")) == n+1
		})
	}
	return addr
}
