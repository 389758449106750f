//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// killGroup makes cmd's cancellation kill its whole process group: go test
// and the test binary it started.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
