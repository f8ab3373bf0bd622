package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// backendNames are the names a comparison must not test outside
// config: behaviour follows declared capabilities, never a
// backend's name.
var backendNames = map[string]bool{"raft": true, "zookeeper": true, "memory": true, "none": true}

// nameConstants are config's names of the built-in backends.
var nameConstants = map[string]bool{"BackendRaft": true, "BackendZooKeeper": true, "BackendMemory": true, "BackendNone": true}

// nameAllowed reports whether the file at rel (slash-separated, relative
// to the module root) may compare backend names: the configuration, which
// selects a backend by name and declares what the host does for each
// built-in one; tests; generated code.
func nameAllowed(rel string) bool {
	return strings.HasPrefix(rel, "config/") ||
		strings.HasSuffix(rel, "_test.go") || strings.HasSuffix(rel, ".pb.go")
}

// isNameExpr reports whether e reads a backend's name: X.Capabilities().Name,
// X.Descriptor().Name, caps.Name, or one of config's name constants.
func isNameExpr(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	if nameConstants[sel.Sel.Name] {
		return true
	}
	if sel.Sel.Name != "Name" {
		return false
	}
	switch x := sel.X.(type) {
	case *ast.CallExpr:
		if f, ok := x.Fun.(*ast.SelectorExpr); ok {
			return f.Sel.Name == "Capabilities" || f.Sel.Name == "Descriptor"
		}
	case *ast.Ident:
		n := strings.ToLower(x.Name)
		return strings.Contains(n, "caps") || strings.Contains(n, "capabilities")
	}
	return false
}

// isNameLiteral reports whether e is a string literal naming a backend.
func isNameLiteral(e ast.Expr) bool {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return false
	}
	s, err := strconv.Unquote(lit.Value)
	return err == nil && backendNames[s]
}

// nameComparisons returns "file:line: ..." for every comparison in src that
// tests a backend's name.
func nameComparisons(fset *token.FileSet, f *ast.File) []string {
	var out []string
	report := func(n ast.Node, what string) {
		out = append(out, fmt.Sprintf("%s: %s", fset.Position(n.Pos()), what))
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.BinaryExpr:
			if x.Op != token.EQL && x.Op != token.NEQ {
				return true
			}
			if isNameExpr(x.X) || isNameExpr(x.Y) || literalAgainstName(x.X, x.Y) || literalAgainstName(x.Y, x.X) {
				report(x, "compares a backend's name")
			}
		case *ast.SwitchStmt:
			if x.Tag != nil && isNameExpr(x.Tag) {
				report(x, "switches on a backend's name")
				return true
			}
			for _, st := range x.Body.List {
				for _, e := range st.(*ast.CaseClause).List {
					if isNameExpr(e) || (x.Tag != nil && isNameLiteral(e) && strings.Contains(strings.ToLower(exprString(x.Tag)), "name")) {
						report(e, "a case names a backend")
					}
				}
			}
		}
		return true
	})
	return out
}

// literalAgainstName reports whether lit is a backend's name and other an
// expression that reads like one (cfg.Selected.Backend, backendName).
func literalAgainstName(lit, other ast.Expr) bool {
	o := strings.ToLower(exprString(other))
	return isNameLiteral(lit) && (strings.Contains(o, "backend") || strings.Contains(o, "name"))
}

func exprString(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return exprString(x.X) + "." + x.Sel.Name
	case *ast.CallExpr:
		return exprString(x.Fun) + "()"
	}
	return ""
}

// TestNoBehaviourByBackendName: outside config and cmd nothing
// compares a backend's name; callers branch on declared capabilities.
func TestNoBehaviourByBackendName(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	var found []string
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin" || d.Name() == "data" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || nameAllowed(rel) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		found = append(found, nameComparisons(fset, f)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("read only %d files: the check would check nothing", files)
	}
	sort.Strings(found)
	for _, f := range found {
		t.Error(f)
	}
}

// TestNameRuleCatchesComparisons makes sure the rule can fail.
func TestNameRuleCatchesComparisons(t *testing.T) {
	src := `package p
func f(b B, caps C) {
	if b.Capabilities().Name == "raft" {}
	if caps.Name != config.BackendZooKeeper {}
	if config.BackendRaft == s {}
	switch b.Descriptor().Name { case "x": }
	switch d.Name { case "zookeeper": }
	if b.Capabilities().Leases {}
	if n := b.Capabilities().Name; n != "" { _ = n == other }
	if cfg.Selected.Backend == "raft" {}
	if "zookeeper" != backendName {}
	if mode == "memory" {}
}`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := nameComparisons(fset, f)
	wantLines := []string{"p.go:3:", "p.go:4:", "p.go:5:", "p.go:6:", "p.go:7:", "p.go:10:", "p.go:11:"}
	if len(got) != len(wantLines) {
		t.Fatalf("got %d findings, want %d:\n%s", len(got), len(wantLines), strings.Join(got, "\n"))
	}
	for i, w := range wantLines {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("finding %d: %q, want it at %s", i, got[i], w)
		}
	}
	for _, rel := range []string{"config/selector.go", "config/hostfacts.go", "coordinator/x_test.go"} {
		if !nameAllowed(rel) {
			t.Errorf("%s should be allowed to compare names", rel)
		}
	}
	for _, rel := range []string{"coordinator/metrics.go", "cmd/metaplane/internal/cli/coordinator.go", "daemon/coordinator.go"} {
		if nameAllowed(rel) {
			t.Errorf("%s must not be allowed to compare names", rel)
		}
	}
}
