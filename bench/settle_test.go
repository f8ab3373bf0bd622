package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// envBurnUntil makes the test binary a CPU burner (see TestMain): it spins
// until the file the variable names exists, then sleeps until killed.
const envBurnUntil = "METAPLANE_BENCH_TEST_BURN_UNTIL"

func TestMain(m *testing.M) {
	if stop := os.Getenv(envBurnUntil); stop != "" {
		burnUntil(stop)
		time.Sleep(time.Hour)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// burnUntil spins until the file stop exists (checked every few million
// iterations), for at most two minutes.
func burnUntil(stop string) {
	deadline := time.Now().Add(2 * time.Minute)
	x := 0
	for time.Now().Before(deadline) {
		for i := 0; i < 5e6; i++ {
			x += i
		}
		if _, err := os.Stat(stop); err == nil {
			break
		}
	}
	if x == 42 {
		os.Exit(3) // keeps the loop from being optimised away
	}
}

// startBurner starts a real process that burns CPU until stop is created,
// and a System that lists it as its process.
func startBurner(t *testing.T, stop string) *System {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envBurnUntil+"="+stop)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	// Wait (bounded) until it has burnt something, so the test starts
	// from a busy process.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if d, err := ProcessCPU(pid); err == nil && d >= 50*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the burner used no CPU within 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return &System{Name: "burner", Processes: func() []ProcessMemory {
		return []ProcessMemory{{Backend: "burner", Role: "CPU burner", PID: pid}}
	}}
}

// TestSettleWaitsForABusySystem: settle does not return while another
// system's process burns CPU, and returns quiet soon after it stops.
func TestSettleWaitsForABusySystem(t *testing.T) {
	stop := filepath.Join(t.TempDir(), "stop")
	s := startBurner(t, stop)
	// One tick (10 ms) of CPU in a window of 500 ms counts as busy: a
	// burner that gets no tick in 500 ms would need a machine loaded far
	// beyond a test run's.
	rule := settleRule{cores: 0.01, window: 500 * time.Millisecond, limit: 2 * time.Minute}
	type result struct {
		waited time.Duration
		quiet  bool
	}
	done := make(chan result, 1)
	go func() {
		w, q := settle(context.Background(), []*System{s}, rule)
		done <- result{w, q}
	}()
	// Let it see the burner busy for several windows.
	cpu0, _ := ProcessCPU(s.Processes()[0].PID)
	for deadline := time.Now().Add(time.Minute); ; {
		if d, err := ProcessCPU(s.Processes()[0].PID); err == nil && d-cpu0 >= 1500*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			break // a slow machine: what the burner got is still busy
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case r := <-done:
		t.Fatalf("settle returned (waited %v, quiet %v) while the other system was burning CPU", r.waited, r.quiet)
	default:
	}
	stopped := time.Now()
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if !r.quiet {
			t.Fatalf("settle: waited %v and reported not quiet after the burner stopped", r.waited)
		}
		if r.waited < time.Since(stopped) {
			t.Errorf("settle reported %v waited, less than the time since the burner was told to stop", r.waited)
		}
	case <-time.After(time.Minute):
		t.Fatal("settle did not return within a minute of the burner stopping")
	}
}

// TestSettleGivesUpAtItsLimit: a system that stays busy ends the wait at
// the limit, reported as not quiet; a system without processes is quiet at
// once.
func TestSettleGivesUpAtItsLimit(t *testing.T) {
	s := startBurner(t, filepath.Join(t.TempDir(), "never"))
	rule := settleRule{cores: 0.01, window: 300 * time.Millisecond, limit: 1200 * time.Millisecond}
	waited, quiet := settle(context.Background(), []*System{s}, rule)
	if quiet {
		t.Fatalf("settle reported quiet after %v with the burner still burning", waited)
	}
	if waited < rule.limit {
		t.Fatalf("settle gave up after %v, before its limit %v", waited, rule.limit)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if waited, quiet := settle(ctx, []*System{s}, rule); quiet || waited > rule.window {
		t.Fatalf("settle with an ended context: waited %v, quiet %v; want at once, not quiet", waited, quiet)
	}
	if waited, quiet := settle(context.Background(), []*System{{Name: "in-process"}}, rule); !quiet || waited != 0 {
		t.Fatalf("settle on a system without processes: waited %v, quiet %v; want quiet at once", waited, quiet)
	}
}

func TestSettleSummary(t *testing.T) {
	s := newSettleSummary(defaultSettle)
	s.add(300*time.Millisecond, true)
	s.add(15*time.Second, false)
	if s.Batches != 2 || s.Unsettled != 1 || s.WaitedSeconds != 15.3 {
		t.Fatalf("summary %+v, want 2 batches, 1 unsettled, 15.3 s", s)
	}
	line := s.String()
	for _, want := range []string{"0.15 cores", "400 ms", "15 s", "2 batches waited 15.3 s", "1 started with another backend still busy"} {
		if !strings.Contains(line, want) {
			t.Errorf("summary line %q lacks %q", line, want)
		}
	}
}
