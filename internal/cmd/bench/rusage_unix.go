//go:build unix

package main

import (
	"os"
	"runtime"
	"syscall"
)

// maxRSS returns the peak resident set size of this process so far.
func maxRSS() uint64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return rssBytes(int64(ru.Maxrss))
}

// childRSS returns the peak resident set size of an exited child process.
func childRSS(ps *os.ProcessState) uint64 {
	if ps == nil {
		return 0
	}
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok || ru == nil {
		return 0
	}
	return rssBytes(int64(ru.Maxrss))
}

// rssBytes converts ru_maxrss to bytes: Linux and the BSDs count KiB, Apple
// systems bytes.
func rssBytes(v int64) uint64 {
	if runtime.GOOS == "darwin" || runtime.GOOS == "ios" {
		return uint64(v)
	}
	return uint64(v) * 1024
}
