package plugins

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel SIGKILL the plugin when the host
// dies (even by SIGKILL). The plugin also watches its parent (watchParent)
// in case the signal is lost (it is tied to the thread that started it).
//
// The plugin also gets a process group of its own, so that a terminal's
// Ctrl-C or a supervisor's signal to the host's group reaches the host
// only: the host then resigns, closes its clients and stops the plugin in
// order, instead of racing a plugin that is already exiting. The
// parent-death signal still ends the plugin when the host dies.
func setParentDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr.Setpgid = true
}
