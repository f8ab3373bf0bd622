// Package testutil holds helpers shared by metaplane's tests: building the
// project's binaries once per test process, free loopback ports, and
// waiting on conditions.
package testutil

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/internal/ports"
)

var (
	buildMu    sync.Mutex
	buildDir   string
	builtPaths = map[string]string{}
)

// Binary returns the path of one of the project's binaries ("metaplane",
// "metaplane-backend-memory", ...). When METAPLANE_BIN_DIR is set (make test
// sets it to bin/ after `make build`) and holds the binary, that one is used;
// otherwise the binary is built once per test process into a temporary
// directory. A build failure fails t.
func Binary(t testing.TB, name string) string {
	t.Helper()
	if dir := os.Getenv("METAPLANE_BIN_DIR"); dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := builtPaths[name]; ok {
		return p
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "metaplane-test-bin-")
		if err != nil {
			t.Fatalf("temp dir for binaries: %v", err)
		}
		buildDir = d
	}
	pkg, ok := binaryPackages[name]
	if !ok {
		t.Fatalf("testutil.Binary: unknown binary %q", name)
	}
	out := filepath.Join(buildDir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = moduleRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	builtPaths[name] = out
	if name == "metaplane" {
		// metaplane runs its helpers from beside itself (raft bootstrap,
		// bench, ...): build them into the same directory.
		for _, h := range []string{"metaplane-raft-offline", "metaplane-lab"} {
			if _, ok := builtPaths[h]; ok {
				continue
			}
			hp := filepath.Join(buildDir, h)
			cmd := exec.Command("go", "build", "-o", hp, binaryPackages[h])
			cmd.Dir = moduleRoot(t)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build %s: %v\n%s", binaryPackages[h], err, b)
			}
			builtPaths[h] = hp
		}
	}
	return out
}

var binaryPackages = map[string]string{
	"metaplane":                   "./cmd/metaplane",
	"metaplane-raft-offline":      "./cmd/metaplane/metaplane-raft-offline",
	"metaplane-lab":               "./cmd/metaplane/metaplane-lab",
	"metaplane-backend-memory":    "./plugins/memory",
	"metaplane-backend-zookeeper": "./plugins/zookeeper",
	"metaplane-backend-raft":      "./plugins/raft",
}

// moduleRoot finds the directory holding go.mod, from this source file.
func moduleRoot(t testing.TB) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("testutil: cannot locate source")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// that this test process has not handed out before (see ports.Free).
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := ports.Free()
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	return p
}

// WaitFor polls cond every 10ms until it returns true or timeout passes,
// then fails t with what. Use it where no event can be waited on directly.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RequireOrSkip skips t when a needed component is missing, except under
// CI=true, where it fails t: CI never counts a skipped test as passing.
func RequireOrSkip(t testing.TB, ok bool, format string, args ...any) {
	t.Helper()
	if ok {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("required component missing under CI=true: %s", msg)
	}
	t.Skipf("skipping: %s (set up the component, or run under CI=true to fail instead)", msg)
}

// PortFree reports whether port p on 127.0.0.1 can be bound now for both
// TCP and UDP (it binds and releases each).
func PortFree(p int) bool {
	addr := fmt.Sprintf("127.0.0.1:%d", p)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	l.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	pc.Close()
	return true
}
