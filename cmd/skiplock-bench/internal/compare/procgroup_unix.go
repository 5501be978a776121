//go:build unix

package compare

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup starts cmd in a process group of its own and, when its
// context ends, kills the group: Graphile Worker's node forks worker
// processes, and a shell command (-also) may start others.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
