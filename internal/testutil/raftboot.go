package testutil

import (
	"os/exec"
	"strings"
	"testing"
)

// RaftBootstrap formats a Raft member's directory as an operator does
// before a multi-voter cluster's first start: it runs `metaplane raft
// bootstrap` (bin is the metaplane binary) with the configuration flags
// of the member's `metaplane coordinator` command line (args, with or
// without the leading "coordinator": --no-env, --config and -D flags), and
// fails the test when it exits non-zero. The directory is the args'
// coordinator.raft.dir.
func RaftBootstrap(t testing.TB, bin string, args []string) {
	t.Helper()
	if len(args) > 0 && args[0] == "coordinator" {
		args = args[1:]
	}
	dir := ""
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "coordinator.raft.dir="); ok {
			dir = v
		}
	}
	if dir == "" {
		t.Fatalf("raft bootstrap: no -D coordinator.raft.dir=DIR among %v", args)
	}
	cmd := exec.Command(bin, append([]string{"raft", "bootstrap", "--data-dir", dir}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("metaplane raft bootstrap --data-dir %s: %v\n%s", dir, err, out)
	}
}
