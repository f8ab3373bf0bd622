package conformance_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
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
	count := regexp.MustCompile(`(\d+) named properties`).FindStringSubmatch(doc)
	if n := len(conformance.Properties()); count == nil || count[1] != strconv.Itoa(n) {
		t.Errorf("docs/conformance.md does not say \"%d named properties\" (it says %q)", n, count)
	}
	for _, p := range conformance.Properties() {
		row := "| `" + p.Name + "` | " + p.Needs + " | " + p.Description + " |"
		if !strings.Contains(doc, row) {
			t.Errorf("docs/conformance.md lacks the row for %s:\n%s", p.Name, row)
		}
	}
}
