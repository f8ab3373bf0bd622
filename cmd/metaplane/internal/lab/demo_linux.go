//go:build linux

package lab

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the child get SIGKILL when this process dies, so a
// killed demo leaves no process behind.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
