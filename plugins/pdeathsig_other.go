//go:build !linux

package plugins

import "os/exec"

// setParentDeathSignal has no kernel support outside Linux: the plugin's
// own parent watch (watchParent) ends it when the host dies.
func setParentDeathSignal(cmd *exec.Cmd) {}
