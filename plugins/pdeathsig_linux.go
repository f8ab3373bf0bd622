package plugins

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel SIGKILL the plugin when the host
// dies (even by SIGKILL). The plugin also watches its parent (watchParent)
// in case the signal is lost (it is tied to the thread that started it).
//
// The plugin stays in the host's process group, so that stopping the group
// (SIGSTOP, a frozen host) freezes the backend with it: a frozen host must
// not leave a live plugin keeping its session and its leadership alive.
func setParentDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
