//go:build !linux

package lab

import "os/exec"

// setDeathSignal is a no-op where the platform has no parent-death signal;
// the demo still stops its processes on exit and Ctrl-C.
func setDeathSignal(cmd *exec.Cmd) {}
