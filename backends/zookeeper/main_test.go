package zookeeper

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/zktest"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "leader" {
		runHelper()
	}
	code := m.Run()
	zktest.CloseShared()
	os.Exit(code)
}

// testOptions are options for a client of the shared server under a fresh
// root, with short timeouts.
func testOptions(t testing.TB) Options {
	t.Helper()
	return optionsFor(t, zktest.Shared(t).ConnectString())
}

// optionsFor are testOptions for a client of the server at addr.
func optionsFor(t testing.TB, addr string) Options {
	return Options{
		Address:           addr,
		Root:              zktest.UniqueRoot(t),
		SessionTimeout:    4 * time.Second,
		ConnectionTimeout: 10 * time.Second,
		RetryWait:         100 * time.Millisecond,
	}
}

// open opens a client with o and closes it at cleanup.
func open(t testing.TB, o Options) *Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := Open(ctx, o, core.ClientOptions{Name: t.Name()})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}
