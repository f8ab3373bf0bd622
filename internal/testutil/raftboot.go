package testutil

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// RaftBootstrap formats Raft members' directories as an operator does
// before a multi-voter cluster's first start: for each member it runs
// `metaplane raft bootstrap` (bin is the metaplane binary) with the
// configuration flags of the member's `metaplane coordinator` command line
// (with or without the leading "coordinator": --no-env, --config and -D
// flags; the directory is their coordinator.raft.dir), all at once, and
// fails the test when one exits non-zero. Call it before starting any of
// the members, so that they still start together.
func RaftBootstrap(t testing.TB, bin string, members ...[]string) {
	t.Helper()
	errs := make(chan error, len(members))
	for _, args := range members {
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
		go func() {
			out, err := exec.Command(bin, append([]string{"raft", "bootstrap", "--data-dir", dir}, args...)...).CombinedOutput()
			if err != nil {
				err = fmt.Errorf("metaplane raft bootstrap --data-dir %s: %v\n%s", dir, err, out)
			}
			errs <- err
		}()
	}
	for range members {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
