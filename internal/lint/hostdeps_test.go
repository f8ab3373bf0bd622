package lint

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// hostAllowsTesting are the packages outside this module that may import
// the standard library's testing package in the host binary: go-plugin,
// which keeps its test helpers in its main package.
var hostAllowsTesting = map[string]bool{"github.com/hashicorp/go-plugin": true}

// hostForbidden returns why the host binary must not link the package at
// path, or "".
func hostForbidden(path string) string {
	switch {
	case strings.HasPrefix(path, "github.com/lni/"):
		return "the Raft engine runs in the Raft plugin and metaplane-raft-offline"
	case strings.HasPrefix(path, "github.com/cockroachdb/"):
		return "the Raft store runs in the Raft plugin and metaplane-raft-offline"
	case strings.HasPrefix(path, "github.com/go-zookeeper/"):
		return "the ZooKeeper client runs in the ZooKeeper plugin"
	case strings.HasPrefix(path, "github.com/anishathalye/porcupine"):
		return "the linearizability checker is the conformance suite's (metaplane-lab)"
	case under(path, module+"/internal/testutil"), under(path, module+"/internal/zktest"), under(path, module+"/plugins/plugintest"):
		return "test helpers belong in tests and metaplane-lab"
	case under(path, module+"/bench"), under(path, module+"/conformance"):
		return "the bench and the conformance suite run in metaplane-lab"
	case under(path, module+"/backends") && !under(path, module+"/backends/raft/catchup"):
		return "the daemon reaches every backend through its plugin"
	}
	return ""
}

// hostViolations applies hostForbidden and the testing rule to the host
// binary's packages.
func hostViolations(pkgs []hostPkg) []string {
	var out []string
	for _, p := range pkgs {
		if why := hostForbidden(p.ImportPath); why != "" {
			out = append(out, p.ImportPath+": "+why)
		}
		for _, imp := range p.Imports {
			if imp == "testing" && !hostAllowsTesting[p.ImportPath] {
				out = append(out, p.ImportPath+" imports testing: test code belongs in tests and metaplane-lab")
			}
		}
	}
	return out
}

type hostPkg struct {
	ImportPath string
	Imports    []string
}

// TestHostBinaryLinksNoEngine: the metaplane binary (the daemon and the
// operator verbs) links no consensus engine, store, backend client or test
// code; the verbs that need them run in helper binaries
// (cmd/metaplane/internal/cli/helpers.go).
func TestHostBinaryLinksNoEngine(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports", "./cmd/metaplane")
	cmd.Dir = moduleRoot(t)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pkgs []hostPkg
	dec := json.NewDecoder(out)
	for {
		var p hostPkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("go list -deps ./cmd/metaplane: %v", err)
	}
	if len(pkgs) < 50 {
		t.Fatalf("go list reported %d packages: the check would check nothing", len(pkgs))
	}
	for _, v := range hostViolations(pkgs) {
		t.Error(v)
	}
}

// TestHostRulesCatchViolations makes sure each host rule can fail.
func TestHostRulesCatchViolations(t *testing.T) {
	pkgs := []hostPkg{
		{ImportPath: "github.com/lni/dragonboat/v4"},
		{ImportPath: "github.com/cockroachdb/pebble/v2"},
		{ImportPath: "github.com/go-zookeeper/zk"},
		{ImportPath: "github.com/anishathalye/porcupine"},
		{ImportPath: module + "/internal/testutil"},
		{ImportPath: module + "/bench"},
		{ImportPath: module + "/backends/raft"},
		{ImportPath: module + "/backends/raft/catchup"},
		{ImportPath: module + "/cmd/metaplane/internal/cli", Imports: []string{"fmt", "testing"}},
		{ImportPath: "github.com/hashicorp/go-plugin", Imports: []string{"testing"}},
	}
	got := hostViolations(pkgs)
	if len(got) != 8 {
		t.Fatalf("got %d violations, want 8:\n%s", len(got), strings.Join(got, "\n"))
	}
	for _, v := range got {
		if strings.HasPrefix(v, module+"/backends/raft/catchup") || strings.HasPrefix(v, "github.com/hashicorp/go-plugin") {
			t.Errorf("allowed package reported: %s", v)
		}
	}
}
