package coordinator_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/metaplane/metaplane/internal/zktest"
)

// TestMain stops the shared ZooKeeper server (if a test started one) and
// fails the package when a test leaves a goroutine behind.
func TestMain(m *testing.M) {
	code := m.Run()
	zktest.CloseShared()
	if code == 0 {
		// memberlist's Shutdown does not wait for a probe in flight (it
		// ends at its probe timeout): not a leak of ours.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
			goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode.func1")); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
