package conformance_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/metaplane/metaplane/conformance"
)

// TestDocsListEveryProperty keeps docs/conformance.md in step with the
// suite: every property is listed with its description.
func TestDocsListEveryProperty(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "conformance.md"))
	if err != nil {
		t.Fatalf("reading the docs: %v", err)
	}
	doc := string(b)
	for _, p := range conformance.Properties() {
		row := "| `" + p.Name + "` | " + p.Needs + " | " + p.Description + " |"
		if !strings.Contains(doc, row) {
			t.Errorf("docs/conformance.md lacks the row for %s:\n%s", p.Name, row)
		}
	}
}
