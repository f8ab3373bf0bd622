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
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
