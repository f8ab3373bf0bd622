package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// updateGolden is the -update flag: rewrite the golden files instead of
// comparing. It reuses a flag of that name another test file may define.
var updateGolden = func() *bool {
	if flag.Lookup("update") != nil {
		return nil
	}
	return flag.Bool("update", false, "rewrite the golden files of testdata")
}()

func updating() bool {
	if updateGolden != nil {
		return *updateGolden
	}
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// runCLI runs the metaplane command line in-process.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Run(context.Background(), &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb}, args)
	return out.String(), errb.String(), code
}

func TestConfigValidateGolden(t *testing.T) {
	dir := filepath.Join("testdata", "config")
	file := func(name string) string { return filepath.Join(dir, name+".yaml") }
	tests := []struct {
		name string
		args []string
		code int
	}{
		// the selector's rows
		{"zookeeper-only", []string{"--config", file("zookeeper-only")}, ExitOK},
		{"seed-nodes-only", []string{"--config", file("seed-nodes-only")}, ExitOK},
		{"three-voters", []string{"--config", file("three-voters")}, ExitOK},
		{"both", []string{"--config", file("both")}, ExitFailure},
		{"both-by-override", []string{"--config", file("seed-nodes-only"), "-D", "zookeeper.address=zk-1:2181"}, ExitFailure},
		{"neither-default-raft", []string{"--config", file("neither-default-raft")}, ExitOK},
		{"neither-default-zookeeper", []string{"--config", file("neither-default-zookeeper")}, ExitFailure},
		{"neither-default-none", []string{"--config", file("neither-default-none")}, ExitFailure},
		{"no-file", nil, ExitOK},
		{"override-fixes-none", []string{"--config", file("neither-default-none"), "-D", "metadata.backend.default=raft"}, ExitOK},
		{"original-listeners", []string{"--config", file("original-listeners")}, ExitOK},
		{"ambiguous-listeners", []string{"--config", file("ambiguous-listeners")}, ExitFailure},
		// problems
		{"unknown-key", []string{"--config", file("unknown-key")}, ExitFailure},
		{"bad-duration", []string{"--config", file("bad-duration")}, ExitFailure},
		{"bad-voters", []string{"--config", file("bad-voters")}, ExitFailure},
		{"empty-key", []string{"--config", file("empty-key")}, ExitFailure},
		{"empty-key-by-override", []string{"-D", "coordinator.seed.nodes="}, ExitFailure},
		{"bad-timing", []string{"--config", file("bad-timing")}, ExitFailure},
		{"bad-size", []string{"--config", file("bad-size")}, ExitFailure},
		{"many-problems", []string{"--config", file("many-problems")}, ExitFailure},
		{"not-yaml", []string{"--config", file("not-yaml")}, ExitFailure},
		{"missing-file", []string{"--config", file("absent")}, ExitFailure},
		// gossip
		{"gossip", []string{"-D", "coordinator.gossip.enabled=true", "-D", "coordinator.gossip.encryption-key=" + strings.Repeat("A", 43) + "="}, ExitOK},
		{"gossip-bad-key", []string{"-D", "coordinator.gossip.enabled=true", "-D", "coordinator.gossip.encryption-key=" + strings.Repeat("A", 28),
			"-D", "coordinator.gossip.encryption-key-file=" + file("absent")}, ExitFailure},
	}
	for _, tt := range tests {
		for _, asJSON := range []bool{false, true} {
			name, golden := tt.name, filepath.Join(dir, tt.name+".golden")
			args := append([]string{"config", "validate", "--no-env"}, tt.args...)
			if asJSON {
				name, golden = name+"/json", filepath.Join(dir, tt.name+".json.golden")
				args = append(args, "--json")
			}
			t.Run(name, func(t *testing.T) {
				stdout, stderr, code := runCLI(t, args...)
				if code != tt.code {
					t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
				}
				if stderr != "" {
					t.Errorf("unexpected stderr:\n%s", stderr)
				}
				if asJSON {
					var rep struct {
						Valid    *bool            `json:"valid"`
						Problems []map[string]any `json:"problems"`
					}
					if err := json.Unmarshal([]byte(stdout), &rep); err != nil || rep.Valid == nil {
						t.Fatalf("--json output is not the report object (%v):\n%s", err, stdout)
					}
					if *rep.Valid != (tt.code == ExitOK) || (len(rep.Problems) == 0) != *rep.Valid {
						t.Errorf("valid=%v with %d problems, exit %d", *rep.Valid, len(rep.Problems), code)
					}
				} else if code == ExitFailure {
					for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
						if !strings.Contains(line, ": ") {
							t.Errorf("problem line %q is not `key: message`", line)
						}
					}
				}
				compareGolden(t, golden, stdout)
			})
		}
	}
}

func TestConfigValidateReadsEnvironment(t *testing.T) {
	t.Setenv("METAPLANE_CONFIG", filepath.Join("testdata", "config", "seed-nodes-only.yaml"))
	t.Setenv("METAPLANE_ZOOKEEPER_ADDRESS", "zk-1:2181")
	stdout, _, code := runCLI(t, "config", "validate")
	if code != ExitFailure || !strings.Contains(stdout, "coordinator.seed.nodes: backend selection is exclusive") {
		t.Errorf("exit %d, output:\n%s\nwant the file (from METAPLANE_CONFIG) and the variable to conflict", code, stdout)
	}
	t.Setenv("METAPLANE_COORDINATOR_RAFT_PROT", "1")
	stdout, _, code = runCLI(t, "config", "validate", "--no-env")
	if code != ExitOK {
		t.Errorf("--no-env: exit %d, output:\n%s", code, stdout)
	}
	stdout, _, code = runCLI(t, "config", "validate", "-D", "zookeeper.address=")
	if code != ExitFailure || !strings.Contains(stdout, "METAPLANE_COORDINATOR_RAFT_PROT: environment variable names unknown key coordinator.raft.prot") {
		t.Errorf("exit %d, output:\n%s\nwant the unknown variable named", code, stdout)
	}
}

func TestConfigValidateUsage(t *testing.T) {
	tests := [][]string{
		{"config"},
		{"config", "check"},
		{"config", "validate", "--bogus"},
		{"config", "validate", "extra"},
		{"config", "validate", "-D", "novalue"},
		{"config", "validate", "--config"},
		{"config", "validate", "--config="},
	}
	for _, args := range tests {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			stdout, stderr, code := runCLI(t, args...)
			if code != ExitUsage {
				t.Errorf("exit %d, want %d (usage)", code, ExitUsage)
			}
			if stdout != "" || stderr == "" {
				t.Errorf("want the complaint on stderr only; stdout %q stderr %q", stdout, stderr)
			}
		})
	}
	stdout, _, code := runCLI(t, "config", "help", "validate")
	if code != ExitOK || !strings.Contains(stdout, "usage: metaplane config validate") {
		t.Errorf("config help: exit %d, %q", code, stdout)
	}
}

// TestConfigValidatePluginSHA256: config validate checks
// metadata.backend.plugin.sha256 against the plugin binary the
// coordinator would run, and reports a mismatch as a problem naming the
// key, the binary and both digests.
func TestConfigValidatePluginSHA256(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "metaplane-backend-raft")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("#!/bin/sh\nexit 1\n"))
	good := hex.EncodeToString(sum[:])
	wrong := strings.Repeat("ab", 32)
	args := func(digest string, more ...string) []string {
		return append([]string{"config", "validate", "--no-env", "-D", "metadata.backend.plugin.dir=" + dir,
			"-D", "metadata.backend.plugin.sha256=" + digest}, more...)
	}
	if out, _, code := runCLI(t, args(good)...); code != ExitOK || !strings.HasPrefix(out, "valid: backend raft") {
		t.Errorf("the binary's own digest: exit %d, %q", code, out)
	}
	out, _, code := runCLI(t, args(wrong)...)
	if code != ExitFailure {
		t.Errorf("a wrong digest: exit %d, want %d: %q", code, ExitFailure, out)
	}
	for _, want := range []string{"metadata.backend.plugin.sha256: ", bin, good, wrong} {
		if !strings.Contains(out, want) {
			t.Errorf("a wrong digest: the report %q does not name %s", out, want)
		}
	}
	out, _, code = runCLI(t, args(wrong, "--json")...)
	var rep validateReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != ExitFailure || rep.Valid || len(rep.Problems) != 1 ||
		rep.Problems[0].Key != "metadata.backend.plugin.sha256" || !strings.Contains(rep.Problems[0].Message, good) {
		t.Errorf("--json with a wrong digest: exit %d, %+v (%v)", code, rep, err)
	}
	// --plugin names the binary to check, as it names the one to run.
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, []byte("other"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, _, code := runCLI(t, args(good, "--plugin", other)...); code != ExitFailure || !strings.Contains(out, other) {
		t.Errorf("--plugin %s with the default binary's digest: exit %d, %q", other, code, out)
	}
	// A missing binary cannot match.
	empty := t.TempDir()
	if out, _, code := runCLI(t, "config", "validate", "--no-env", "-D", "metadata.backend.plugin.dir="+empty,
		"-D", "metadata.backend.plugin.sha256="+good); code != ExitFailure || !strings.Contains(out, "cannot check the plugin binary "+filepath.Join(empty, "metaplane-backend-raft")) {
		t.Errorf("a missing binary: exit %d, %q", code, out)
	}
	// A tablet server on Raft runs no plugin: nothing to check.
	if out, _, code := runCLI(t, args(wrong, "--observer", "-D", "coordinator.seed.nodes=127.0.0.1:9123")...); code != ExitOK {
		t.Errorf("--observer on Raft with a wrong digest: exit %d, %q", code, out)
	}
}
