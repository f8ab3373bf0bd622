package ports

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
)

func TestFreeNeverRepeats(t *testing.T) {
	const n = 200
	var (
		mu   sync.Mutex
		seen = map[int]bool{}
		wg   sync.WaitGroup
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := Free()
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if seen[p] {
				t.Errorf("port %d handed out twice", p)
			}
			seen[p] = true
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("got %d distinct ports, want %d", len(seen), n)
	}
}

// TestFreeBelowTheEphemeralRange: where the kernel's ephemeral range leaves
// room below it, the ports handed out are there, where no outgoing
// connection takes them.
func TestFreeBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	room := low-1-lowest >= 1000
	for i := 0; i < 20; i++ {
		p, err := Free()
		if err != nil {
			t.Fatal(err)
		}
		if room && (p < lowest || p >= low) {
			t.Fatalf("port %d, want one in [%d, %d)", p, lowest, low)
		}
		if p <= 0 || p > 65535 {
			t.Fatalf("port %d", p)
		}
	}
}

// childEnv, when set, makes the test binary a child that tries to claim
// the port it names and exits 0 if it got the claim, 3 if not.
const childEnv = "METAPLANE_PORTS_CLAIM_CHILD"

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		port, err := strconv.Atoi(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s=%q: %v\n", childEnv, v, err)
			os.Exit(2)
		}
		if !claim(port) {
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// claimIn runs a child process that tries to claim port and reports
// whether it got it.
func claimIn(t *testing.T, port int) bool {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strconv.Itoa(port))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true
	case errors.As(err, &exit) && exit.ExitCode() == 3:
		return false
	default:
		t.Fatalf("claim child for port %d: %v: %s", port, err, out)
		return false
	}
}

// TestFreeClaimsAcrossProcesses: a port this process handed out cannot be
// claimed by another process while this one lives, and a claim goes with
// the process that held it.
func TestFreeClaimsAcrossProcesses(t *testing.T) {
	held, err := Free()
	if err != nil {
		t.Fatal(err)
	}
	if claimIn(t, held) {
		t.Fatalf("another process claimed port %d, which this process handed out", held)
	}
	// A port nobody here handed out (another test process may hold one:
	// the next is tried): the first child claims it and exits, and its
	// claim goes with it.
	other := 0
	for p := held + 1; p < held+50 && other == 0; p++ {
		if !issued[p] && claimIn(t, p) {
			other = p
		}
	}
	if other == 0 {
		t.Fatalf("no child could claim any of the 49 ports after %d", held)
	}
	if !claimIn(t, other) {
		t.Fatalf("port %d is still claimed after the child that claimed it exited", other)
	}
}
