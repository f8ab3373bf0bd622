package cli

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/metaplane/metaplane/internal/testutil"
)

// compareGolden compares got with the golden file at path, or rewrites the
// file under -update.
func compareGolden(t *testing.T, path, got string) {
	t.Helper()
	if updating() {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden %s: %v (run with -update to create it)", path, err)
	}
	if got != string(want) {
		t.Fatalf("output differs from %s (run with -update to accept)\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

// transcript is what a golden file of testdata/cli holds: the exit code
// and both streams.
func transcript(code int, stdout, stderr string) string {
	return fmt.Sprintf("exit %d\nstdout:\n%sstderr:\n%s", code, stdout, stderr)
}

// fakeBuildInfo makes the version verbs read info, for the test.
func fakeBuildInfo(t *testing.T, info *debug.BuildInfo) {
	t.Helper()
	saved := readBuildInfo
	readBuildInfo = func() (*debug.BuildInfo, bool) { return info, info != nil }
	t.Cleanup(func() { readBuildInfo = saved })
}

// TestCLIGolden runs help, usage errors and version through Run and
// compares the exit code and both streams with testdata/cli/<name>.golden.
func TestCLIGolden(t *testing.T) {
	fakeBuildInfo(t, &debug.BuildInfo{
		GoVersion: "go1.99.0",
		Main:      debug.Module{Path: "github.com/metaplane/metaplane", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-11-30T12:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	})
	// Nothing listens on the address the admin usage errors name: they
	// must fail before they dial.
	const bs = "--bootstrap-servers=127.0.0.1:1"
	tests := []struct {
		name string
		args []string
		code int
	}{
		// generated help
		{"help-root", []string{"--help"}, ExitOK},
		{"no-command", nil, ExitUsage},
		{"help-admin", []string{"admin", "--help"}, ExitOK},
		{"help-create-table", []string{"admin", "create-table", "--help"}, ExitOK},
		{"no-admin-verb", []string{"admin"}, ExitUsage},
		{"help-config-validate", []string{"config", "validate", "-h"}, ExitOK},
		{"help-coordinator", []string{"coordinator", "--help"}, ExitOK},
		// usage errors
		{"unknown-command", []string{"cordinator"}, ExitUsage},
		{"unknown-verb-suggestion", []string{"admin", "lst-tables", bs}, ExitUsage},
		{"unknown-flag", []string{"admin", "list-databases", "--bogus", bs}, ExitUsage},
		{"unknown-legacy-flag", []string{"admin", "list-databases", "-bogus", bs}, ExitUsage},
		{"missing-argument", []string{"admin", "describe-table", bs}, ExitUsage},
		{"extra-argument", []string{"admin", "list-databases", "extra", bs}, ExitUsage},
		{"bad-flag-value", []string{"admin", "allocate-ids", "writer", "--count", "many", bs}, ExitUsage},
		{"allocate-ids-count-zero", []string{"admin", "allocate-ids", "writer", "--count", "0", bs}, ExitUsage},
		{"allocate-ids-count-above-limit", []string{"admin", "allocate-ids", "writer", "--count", "1000001", bs}, ExitUsage},
		{"help-tablet-server", []string{"tablet-server", "--help"}, ExitOK},
		{"bad-duration", []string{"admin", "list-databases", "--timeout", "soon", bs}, ExitUsage},
		{"flag-needs-value", []string{"admin", "list-databases", "--bootstrap-servers"}, ExitUsage},
		{"bad-override", []string{"config", "validate", "-D", "novalue"}, ExitUsage},
		{"help-unknown-verb", []string{"admin", "help", "nope"}, ExitUsage},
		// --json errors: one JSON object on stderr
		{"json-unknown-verb", []string{"admin", "--json", "frobnicate", bs}, ExitUsage},
		{"json-missing-argument", []string{"admin", "list-tables", bs, "--json"}, ExitUsage},
		{"json-bad-flag-after-json", []string{"admin", "list-tables", "db", "--json", "--bogus", bs}, ExitUsage},
		{"json-bad-flag-before-json", []string{"admin", "list-tables", "db", "--bogus", "--json", bs}, ExitUsage},
		{"json-version-extra", []string{"version", "extra", "--json"}, ExitUsage},
		// version
		{"version", []string{"version"}, ExitOK},
		{"version-flag", []string{"--version"}, ExitOK},
		{"version-json", []string{"version", "--json"}, ExitOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			if strings.HasPrefix(tt.name, "json-") {
				var e jsonError
				if err := json.Unmarshal([]byte(stderr), &e); err != nil || e.Error == "" || e.Code != codeUsage || e.Command == "" {
					t.Errorf("stderr is not one JSON usage error (%v): %q", err, stderr)
				}
			}
			compareGolden(t, filepath.Join("testdata", "cli", tt.name+".golden"), transcript(code, stdout, stderr))
		})
	}
}

// TestHelpForms: every way of asking for a command's help prints the
// same text, on stdout, with exit 0.
func TestHelpForms(t *testing.T) {
	for _, forms := range [][][]string{
		{{"--help"}, {"-h"}, {"help"}, {"-help"}},
		{{"admin", "--help"}, {"admin", "-h"}, {"admin", "help"}, {"help", "admin"}, {"admin", "-help"}, {"admin", "--json", "--help"}},
		{{"admin", "create-table", "--help"}, {"admin", "help", "create-table"}, {"help", "admin", "create-table"}, {"admin", "create-table", "x.y", "-h"}},
		{{"config", "validate", "--help"}, {"config", "help", "validate"}, {"config", "-D", "a=b", "validate", "-h"}},
	} {
		want, _, _ := runCLI(t, forms[0]...)
		if !strings.HasPrefix(want, "usage: metaplane") {
			t.Errorf("%q: %q is no help text", forms[0], want)
		}
		for _, args := range forms {
			stdout, stderr, code := runCLI(t, args...)
			if code != ExitOK || stdout != want || stderr != "" {
				t.Errorf("%q: exit %d, stderr %q, stdout:\n%s\nwant exit 0 and the help of %q:\n%s", args, code, stderr, stdout, forms[0], want)
			}
		}
	}
}

// TestVersionWithoutVCS: a build without VCS stamping (-buildvcs=false,
// as the Makefile builds here) or without build information says so.
func TestVersionWithoutVCS(t *testing.T) {
	fakeBuildInfo(t, &debug.BuildInfo{GoVersion: "go1.99.0", Main: debug.Module{Path: "github.com/metaplane/metaplane", Version: "(devel)"}})
	stdout, _, code := runCLI(t, "version")
	want := "metaplane (devel)\n  module: github.com/metaplane/metaplane\n  commit: unknown (built without VCS information)\n  go:     go1.99.0 " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if code != ExitOK || stdout != want {
		t.Errorf("exit %d, got\n%s\nwant\n%s", code, stdout, want)
	}
	fakeBuildInfo(t, nil)
	stdout, _, code = runCLI(t, "version", "--json")
	var v versionInfo
	if err := json.Unmarshal([]byte(stdout), &v); err != nil || code != ExitOK {
		t.Fatalf("exit %d, %v: %q", code, err, stdout)
	}
	if want := (versionInfo{Module: "unknown", Version: "unknown", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}); v != want {
		t.Errorf("no build info: got %+v, want %+v", v, want)
	}
}

// TestFlagsAnywhere runs the same admin call with its flags before the
// verb, after it, between verb and argument, and in the old single-dash
// spelling: every form gives the same answer.
func TestFlagsAnywhere(t *testing.T) {
	addr := startMemoryCoordinator(t)
	if _, stderr, code := runCLI(t, "admin", "create-database", "shop", "--bootstrap-servers", addr); code != ExitOK {
		t.Fatalf("create-database: exit %d: %s", code, stderr)
	}
	want := "{\n  \"names\": [\n    \"shop\"\n  ],\n  \"next_page_token\": \"\"\n}\n"
	for _, args := range [][]string{
		{"admin", "--json", "--bootstrap-servers", addr, "list-databases"},
		{"admin", "list-databases", "--json", "--bootstrap-servers", addr},
		{"admin", "--bootstrap-servers=" + addr, "list-databases", "--json"},
		{"admin", "-json", "-bootstrap-servers", addr, "list-databases"},
		{"admin", "list-databases", "-json=true", "-bootstrap-servers=" + addr, "-timeout", "10s"},
	} {
		stdout, stderr, code := runCLI(t, args...)
		if code != ExitOK || stdout != want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 0 and %q", args, code, stdout, stderr, want)
		}
	}
	// A flag value that looks like a flag is a value, not a flag.
	stdout, stderr, code := runCLI(t, "admin", "create-database", "db2", "--comment", "-json", "-bootstrap-servers", addr)
	if code != ExitOK || stdout != "created database db2\n" {
		t.Errorf("--comment -json: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// Config flags are persistent on `config`: before the verb too.
	stdout, _, code = runCLI(t, "config", "--no-env", "-D", "zookeeper.address=zk-1:2181", "validate")
	if code != ExitOK || !strings.HasPrefix(stdout, "valid: backend zookeeper") {
		t.Errorf("config -D ... validate: exit %d, %q", code, stdout)
	}
}

// TestAdminJSONErrors: under --json an admin error is one JSON object on
// stderr whose code is the admin API's ErrorDetail code.
func TestAdminJSONErrors(t *testing.T) {
	addr := startMemoryCoordinator(t)
	bs := "--bootstrap-servers=" + addr
	for _, args := range [][]string{
		{"admin", "create-database", "shop", bs},
		{"admin", "create-table", "shop.t", "--column", "a:INT", bs},
	} {
		if _, stderr, code := runCLI(t, args...); code != ExitOK {
			t.Fatalf("%q: exit %d: %s", args, code, stderr)
		}
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := closed.Addr().String()
	closed.Close()
	tests := []struct {
		name string
		args []string
		code string
	}{
		{"json-not-found", []string{"admin", "describe-table", "shop.nope", bs, "--json"}, "NOT_FOUND"},
		{"json-already-exists", []string{"admin", "--json", "create-database", "shop", bs}, "ALREADY_EXISTS"},
		{"json-not-empty", []string{"admin", "drop-database", "shop", "--json", bs}, "NOT_EMPTY"},
		{"json-invalid-argument", []string{"admin", "allocate-ids", "nope", bs, "--json"}, "INVALID_ARGUMENT"},
		{"json-no-coordinator", []string{"admin", "list-databases", "--json", "--timeout", "2s", "--bootstrap-servers", nobody}, "UNAVAILABLE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, tt.args...)
			if code != ExitFailure || stdout != "" {
				t.Errorf("exit %d, stdout %q; want exit 1 and nothing on stdout", code, stdout)
			}
			var e jsonError
			if err := json.Unmarshal([]byte(stderr), &e); err != nil || e.Error == "" || e.Code != tt.code {
				t.Fatalf("stderr is not one JSON error with code %s (%v): %q", tt.code, err, stderr)
			}
			stderr = strings.ReplaceAll(strings.ReplaceAll(stderr, addr, "ADDR"), nobody, "NOBODY")
			compareGolden(t, filepath.Join("testdata", "cli", tt.name+".golden"), transcript(code, stdout, stderr))
		})
	}
}

func TestLegacyLongFlags(t *testing.T) {
	tests := []struct{ in, want []string }{
		{[]string{"admin", "-json", "list-databases"}, []string{"admin", "--json", "list-databases"}},
		{[]string{"admin", "-bootstrap-servers", "h:1", "list-tables", "-json=false", "db"},
			[]string{"admin", "--bootstrap-servers", "h:1", "list-tables", "--json=false", "db"}},
		// the value of a flag is left alone, even when it looks like a flag
		{[]string{"admin", "create-database", "d", "-comment", "-json"}, []string{"admin", "create-database", "d", "--comment", "-json"}},
		{[]string{"admin", "create-database", "d", "--comment", "-json"}, []string{"admin", "create-database", "d", "--comment", "-json"}},
		// short flags, their values and attached values are left alone
		{[]string{"config", "-D", "a=b", "validate", "-Dc=d", "-no-env"}, []string{"config", "-D", "a=b", "validate", "-Dc=d", "--no-env"}},
		{[]string{"bench", "-v", "-quick"}, []string{"bench", "-v", "--quick"}},
		{[]string{"-version"}, []string{"--version"}},
		{[]string{"admin", "list-tables", "-help"}, []string{"admin", "list-tables", "--help"}},
		// an unknown flag is reported by its long name
		{[]string{"admin", "list-tables", "-bogus"}, []string{"admin", "list-tables", "--bogus"}},
		// nothing after --, and no completion request, is touched
		{[]string{"admin", "create-database", "--", "-json"}, []string{"admin", "create-database", "--", "-json"}},
		{[]string{"__complete", "admin", "-js"}, []string{"__complete", "admin", "-js"}},
	}
	for _, tt := range tests {
		if got := legacyLongFlags(newRoot(), tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("legacyLongFlags(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestBinary runs the real binary: its exit codes come from main, and
// version, --version and completion work there.
func TestBinary(t *testing.T) {
	bin := testutil.Binary(t, "metaplane")
	run := func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return stdout.String(), stderr.String(), code
	}

	text, _, code := run("version")
	if code != ExitOK {
		t.Fatalf("version: exit %d", code)
	}
	if flag, _, _ := run("--version"); flag != text {
		t.Errorf("--version printed %q, version %q", flag, text)
	}
	out, _, code := run("version", "--json")
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != ExitOK {
		t.Fatalf("version --json: exit %d, %v: %q", code, err, out)
	}
	if v.Module != "github.com/metaplane/metaplane" || v.Go != runtime.Version() || v.Version == "" {
		t.Errorf("version --json: %+v; want this module, built by %s", v, runtime.Version())
	}
	if v.Commit == "" && !strings.Contains(text, "commit: unknown") || v.Commit != "" && !strings.Contains(text, v.Commit) {
		t.Errorf("version says %q for commit %q", text, v.Commit)
	}

	if _, stderr, code := run("admin", "list-databases", "--bogus"); code != ExitUsage || !strings.Contains(stderr, "unknown flag: --bogus") {
		t.Errorf("unknown flag: exit %d, stderr %q; want exit 2", code, stderr)
	}
	if _, stderr, code := run("config", "validate", "--no-env", "-D", "metadata.backend.default=none"); code != ExitFailure || stderr != "" {
		t.Errorf("config validate with a problem: exit %d, stderr %q; want exit 1", code, stderr)
	}

	script, _, code := run("completion", "bash")
	if code != ExitOK || !strings.Contains(script, "__start_metaplane") {
		t.Errorf("completion bash: exit %d, %d bytes without __start_metaplane", code, len(script))
	}
	out, _, code = run("__complete", "admin", "list-")
	if code != ExitOK || !strings.Contains(out, "list-databases\t") || !strings.Contains(out, "list-tables\t") || strings.Contains(out, "create-table") {
		t.Errorf("completing `admin list-`: exit %d, %q", code, out)
	}
}
