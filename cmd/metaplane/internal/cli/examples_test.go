package cli

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// offlineGo runs the go command in dir on the module cache only: the
// example module's go.sum is committed and its replace points at this
// repository, so nothing needs the network.
func offlineGo(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=readonly -buildvcs=false", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
}

// TestWritingABackendBlocksAreTheExample: every Go block of
// docs/writing-a-backend.md names the example file it shows (```go
// file=PATH) and is that file exactly, so the doc's code is the code the
// next test compiles and runs.
func TestWritingABackendBlocksAreTheExample(t *testing.T) {
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "writing-a-backend.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?ms)^```go([^\n]*)\n(.*?)^```$").FindAllStringSubmatch(string(doc), -1)
	if len(blocks) < 3 {
		t.Fatalf("%d Go blocks in docs/writing-a-backend.md, want the provider, the main and the test", len(blocks))
	}
	for _, b := range blocks {
		file, ok := strings.CutPrefix(strings.TrimSpace(b[1]), "file=")
		if !ok {
			t.Errorf("a Go block without file=PATH (use ```text for an excerpt):\n%s", b[2])
			continue
		}
		want, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Errorf("block file=%s: %v", file, err)
			continue
		}
		if b[2] != string(want) {
			t.Errorf("the block file=%s differs from the file: copy the file into the doc", file)
		}
	}
}

// TestExampleBackendModule builds examples/tinymem as its own module (and
// compiles its tests, the doc's test example) and runs `metaplane
// conformance --plugin` on the plugin it builds: every property must pass.
func TestExampleBackendModule(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "examples", "tinymem")
	bin := filepath.Join(t.TempDir(), "metaplane-backend-tinymem")
	offlineGo(t, dir, "build", "-o", bin, "./cmd/metaplane-backend-tinymem")
	// Compiles the module's tests (the doc's test example) and runs its own
	// unit tests; its conformance tests are what the run below does.
	offlineGo(t, dir, "test", "-count=1", "-skip", "^TestConformance", "./...")
	out, errOut, code := runCLI(t, "conformance", "--plugin", bin, "-D", "tinymem.max-nodes=100000", "--no-env")
	if code != ExitOK {
		t.Fatalf("conformance exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	summary := lines[len(lines)-1]
	if !regexp.MustCompile(`^conformance: [1-9][0-9]* passed, 0 failed, [0-9]+ skipped$`).MatchString(summary) {
		t.Errorf("summary %q: want every property passed or skipped", summary)
	}
	for _, l := range lines {
		if strings.Contains(l, "does not implement conformance.") {
			// A need of the harness (such as conformance.Silencer), not a
			// capability: `conformance --plugin` cannot meet it for any
			// plugin.
			continue
		}
		if strings.HasPrefix(l, "SKIP Capabilities/MatchDescriptor") || strings.HasPrefix(l, "SKIP Watch/") || strings.HasPrefix(l, "SKIP Session/") {
			t.Errorf("the example declares what %q needs: %s", strings.Fields(l)[1], l)
		}
	}
}

// TestExampleImportsThePublicKitOnly: the example backend delegates to
// nothing of this module but the kit a third party gets (core, plugins and
// its plugintest, conformance); never a backend or an internal package.
func TestExampleImportsThePublicKitOnly(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "examples", "tinymem")
	allowed := map[string]bool{"core": true, "settings": true, "plugins": true, "plugins/plugintest": true, "conformance": true}
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		files++
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			if rest, ok := strings.CutPrefix(p, "github.com/metaplane/metaplane/"); ok && !allowed[rest] {
				t.Errorf("%s imports %s: the example may use only %v of this module", path, p, keys(allowed))
			}
		}
		return nil
	})
	if err != nil || files < 4 {
		t.Fatalf("reading %s: %v (%d Go files)", dir, err, files)
	}
}
