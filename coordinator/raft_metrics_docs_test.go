package coordinator

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestRaftMetricsDocumented keeps the two lists of the Raft metrics in
// step with what the status collector exports: every metaplane_raft_*
// name is a row of docs/getting-started.md's metrics table and of the one
// table under docs/raft.md's "### Metrics" (a blank line inside that
// table would end it, and the rows after it would no longer render).
func TestRaftMetricsDocumented(t *testing.T) {
	ch := make(chan *prometheus.Desc, 64)
	newStatusCollector(nil).Describe(ch)
	close(ch)
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	var names []string
	for d := range ch {
		m := fq.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		if strings.HasPrefix(m[1], "metaplane_raft_") {
			names = append(names, m[1])
		}
	}
	if len(names) < 5 {
		t.Fatalf("found only %d metaplane_raft_* metrics: %v", len(names), names)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	started := tableRows(read("getting-started.md"), "## Metrics")
	raft := tableRows(read("raft.md"), "### Metrics")
	for _, n := range names {
		if !strings.Contains(started, "`"+n) {
			t.Errorf("docs/getting-started.md's metrics table has no row for %s", n)
		}
		if !strings.Contains(raft, "| `"+n) {
			t.Errorf("docs/raft.md's metrics table has no row for %s", n)
		}
	}
}

// tableRows returns the first table after the heading line, up to its
// first line that is not a table row.
func tableRows(doc, heading string) string {
	_, after, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		return ""
	}
	var rows []string
	for _, line := range strings.Split(after, "\n") {
		if strings.HasPrefix(line, "|") {
			rows = append(rows, line)
		} else if len(rows) > 0 {
			break
		}
	}
	return strings.Join(rows, "\n")
}
