package plugins

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The test binary doubles as a plugin host for the host-death test: with
// envHostRole set it launches the plugin at envHostPlugin, prints the
// plugin's pid on stdout and waits to be killed.
const (
	envHostRole         = "METAPLANE_TEST_PLUGINS_HOST"
	envHostPlugin       = "METAPLANE_TEST_PLUGINS_HOST_PLUGIN"
	envHostNoDeathSig   = "METAPLANE_TEST_PLUGINS_HOST_NO_PDEATHSIG"
	hostRoleWaitTimeout = 60 * time.Second
)

func TestMain(m *testing.M) {
	if os.Getenv(envHostRole) == "1" {
		os.Exit(runTestHost())
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(goleakOptions...); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines leaked by the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// goleakOptions ignore what outlives a test by design: go-plugin's and
// gRPC's background goroutines of connections being torn down.
var goleakOptions = []goleak.Option{}

// runTestHost is the host role: launch, report the pid, wait (bounded) to
// be killed.
func runTestHost() int {
	// The plugin must not see the role variable.
	os.Unsetenv(envHostRole)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := Launch(ctx, LaunchOptions{
		Path:          os.Getenv(envHostPlugin),
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		noDeathSignal: os.Getenv(envHostNoDeathSig) == "1",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "launch:", err)
		return 1
	}
	fmt.Printf("pid %d\n", p.Pid())
	time.Sleep(hostRoleWaitTimeout)
	_ = p.Close()
	return 0
}
