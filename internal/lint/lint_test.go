package lint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/metaplane/metaplane"

// pkg is what the layering rules need of `go list -json`.
type pkg struct {
	ImportPath string
	Deps       []string
	Error      *struct{ Err string }
}

// under reports whether path is prefix itself or a package below it.
func under(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// backendOf returns the backend a package belongs to ("memory" for
// .../backends/memory/x), or "".
func backendOf(path string) string {
	rest, ok := strings.CutPrefix(path, module+"/backends/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	return name
}

// stdlibOnly are the packages that import the standard library only (and
// each other): the contract, what a backend parses its settings with, and
// the fan-out every backend delivers its session events and leaders with.
var stdlibOnly = map[string]bool{
	module + "/core":              true,
	module + "/settings":          true,
	module + "/config/raftkeys":   true,
	module + "/internal/fanout":   true,
	module + "/internal/tlsutil":  true,
	module + "/internal/deadline": true,
}

// isStdlib reports whether an import path is the standard library's (its
// first element has no dot).
func isStdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// violations applies the layering rules to pkgs (each with its transitive
// dependencies, tests excluded) and returns one line per broken rule.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		for _, d := range p.Deps {
			var why string
			switch {
			case stdlibOnly[p.ImportPath] && !isStdlib(d) && !stdlibOnly[d]:
				why = "the contract (and the settings decoder and fan-out backends share) imports the standard library only"
			case (under(p.ImportPath, module+"/coordinator") || under(p.ImportPath, module+"/internal/authn")) && under(d, module+"/adminclient"):
				why = "a server of the admin wire imports its contract (adminapi), never the client SDK"
			case under(p.ImportPath, module+"/coordinator") || under(p.ImportPath, module+"/tabletserver"):
				switch {
				case under(d, module+"/plugins"):
					why = "the coordinator and the tablet server reach a backend through core, never plugin code"
				case under(d, module+"/backends"):
					why = "the coordinator and the tablet server reach a backend through core, never a backend package"
				}
			case under(p.ImportPath, module+"/catalog") || under(p.ImportPath, module+"/image"):
				switch {
				case under(d, module+"/backends") || under(d, module+"/plugins"):
					why = "the catalog and the image work through core only, never a backend or plugin code"
				case under(d, "google.golang.org/grpc"):
					why = "the catalog and the image must not import gRPC"
				}
			case under(p.ImportPath, module+"/core"):
				switch {
				case under(d, module+"/backends"):
					why = "core must not import a backend"
				case under(d, module+"/plugins"):
					why = "core must not import plugin code"
				case under(d, "google.golang.org/grpc"):
					why = "core must not import gRPC"
				case under(d, "github.com/hashicorp/go-plugin"):
					why = "core must not import go-plugin"
				}
			case under(p.ImportPath, module+"/migrate"):
				if under(d, module+"/backends") || under(d, module+"/plugins") {
					why = "the migration engine works through core only, never a backend or plugin code"
				}
			case under(p.ImportPath, module+"/conformance"):
				if under(d, module+"/backends") {
					why = "conformance must not import a backend (only its tests may)"
				}
			case under(p.ImportPath, module+"/backends/raft/fsm") && strings.HasPrefix(d, "github.com/lni/") && d != "github.com/lni/dragonboat/v4/statemachine":
				why = "the Raft state machine is driven by the entries it is given: no Dragonboat node, log store or transport in it (only its statemachine types)"
			case backendOf(p.ImportPath) != "":
				switch {
				case under(d, module+"/plugins"):
					why = "a backend must not import plugin code"
				case backendOf(d) != "" && backendOf(d) != backendOf(p.ImportPath):
					why = "a backend must not import another backend"
				}
			}
			if why != "" {
				out = append(out, fmt.Sprintf("%s imports %s: %s", p.ImportPath, d, why))
			}
		}
	}
	sort.Strings(out)
	return out
}

// moduleRoot returns the directory holding go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == "/dev/null" {
		t.Fatalf("not inside the module (go env GOMOD = %q)", gomod)
	}
	return filepath.Dir(gomod)
}

// list runs `go list -deps`-style listing of the layered packages.
func list(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Deps,Error", "./core/...", "./catalog/...", "./image/...", "./settings/...", "./config/...", "./conformance/...", "./migrate/...", "./backends/...", "./coordinator/...", "./tabletserver/...", "./internal/fanout/...", "./internal/tlsutil/...", "./internal/deadline/...", "./internal/authn/...")
	cmd.Dir = moduleRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		if p.Error != nil {
			// A package that does not build (work in progress) is still
			// checked on the imports go list could read.
			t.Logf("%s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestLayering(t *testing.T) {
	pkgs := list(t)
	seen := map[string]bool{}
	for _, p := range pkgs {
		seen[p.ImportPath] = true
	}
	for _, must := range []string{module + "/core", module + "/catalog", module + "/image", module + "/conformance", module + "/backends/memory", module + "/coordinator", module + "/tabletserver", module + "/settings", module + "/internal/fanout", module + "/internal/tlsutil", module + "/internal/deadline"} {
		if !seen[must] {
			t.Fatalf("go list did not report %s: the check would check nothing", must)
		}
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// TestRulesCatchViolations makes sure each rule can fail.
func TestRulesCatchViolations(t *testing.T) {
	pkgs := []pkg{
		{ImportPath: module + "/core", Deps: []string{"context", module + "/backends/memory"}},
		{ImportPath: module + "/catalog", Deps: []string{"google.golang.org/grpc/codes"}},
		{ImportPath: module + "/image", Deps: []string{module + "/core", module + "/backends/memory"}},
		{ImportPath: module + "/core/x", Deps: []string{module + "/plugins/shim", "github.com/hashicorp/go-plugin"}},
		{ImportPath: module + "/conformance", Deps: []string{module + "/core", module + "/backends/raft"}},
		{ImportPath: module + "/backends/raft", Deps: []string{module + "/core", module + "/backends/raft/internal/sm", module + "/backends/memory"}},
		{ImportPath: module + "/backends/zookeeper", Deps: []string{module + "/plugins"}},
		{ImportPath: module + "/backends/raft/fsm", Deps: []string{"github.com/lni/dragonboat/v4/statemachine", "github.com/lni/dragonboat/v4"}},
		{ImportPath: module + "/backends/memory", Deps: []string{module + "/core", module + "/backendsx"}},
		{ImportPath: module + "/settings", Deps: []string{"strings", "github.com/knadh/koanf/v2"}},
		{ImportPath: module + "/config/raftkeys", Deps: []string{module + "/settings", "time"}},
		{ImportPath: module + "/coordinator", Deps: []string{module + "/core", module + "/plugins"}},
		{ImportPath: module + "/internal/authn", Deps: []string{module + "/adminapi", module + "/adminclient"}},
		{ImportPath: module + "/tabletserver/x", Deps: []string{module + "/adminclient", module + "/backends/raft"}},
		{ImportPath: module + "/migrate", Deps: []string{module + "/core", module + "/backends/memory"}},
		{ImportPath: module + "/internal/fanout", Deps: []string{"context", "sync", module + "/catalog"}},
	}
	got := violations(pkgs)
	want := []string{
		module + "/backends/raft imports " + module + "/backends/memory",
		module + "/backends/raft/fsm imports github.com/lni/dragonboat/v4",
		module + "/backends/zookeeper imports " + module + "/plugins",
		module + "/catalog imports google.golang.org/grpc/codes",
		module + "/conformance imports " + module + "/backends/raft",
		module + "/coordinator imports " + module + "/plugins",
		module + "/core imports " + module + "/backends/memory",
		module + "/core/x imports github.com/hashicorp/go-plugin",
		module + "/core/x imports " + module + "/plugins/shim",
		module + "/image imports " + module + "/backends/memory",
		module + "/internal/authn imports " + module + "/adminclient",
		module + "/internal/fanout imports " + module + "/catalog",
		module + "/migrate imports " + module + "/backends/memory",
		module + "/settings imports github.com/knadh/koanf/v2",
		module + "/tabletserver/x imports " + module + "/backends/raft",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d violations, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]+":") {
			t.Errorf("violation %d: got %q, want it to start with %q", i, got[i], want[i])
		}
	}
}

// TestCoreHoldsTheContractOnly: core/ is the contract, one package; the
// catalog, the image, the configuration and the settings decoder live in
// rooms of their own beside it.
func TestCoreHoldsTheContractOnly(t *testing.T) {
	cmd := exec.Command("go", "list", "./core/...")
	cmd.Dir = moduleRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./core/...: %v", err)
	}
	got := strings.Fields(string(out))
	if len(got) != 1 || got[0] != module+"/core" {
		t.Fatalf("core/ holds %v; want only %s (put helpers in packages of their own)", got, module+"/core")
	}
}
