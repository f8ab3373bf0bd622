package procstat

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

func TestCPUAndChildren(t *testing.T) {
	start := CPU(os.Getpid())
	// Spin until the process has used at least 50 ms more (bounded).
	deadline := time.Now().Add(10 * time.Second)
	x := 0
	for CPU(os.Getpid())-start < 50*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("CPU did not grow past %v after 10 s of spinning", start)
		}
		for i := 0; i < 1_000_000; i++ {
			x += i
		}
	}
	_ = x
	if CPU(-1) != 0 {
		t.Fatal("CPU of a pid that does not exist is not 0")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if kids := Children(os.Getpid()); !slices.Contains(kids, cmd.Process.Pid) {
		t.Fatalf("children %v lack the started process %d", kids, cmd.Process.Pid)
	}
}
