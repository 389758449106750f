//go:build linux

package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// peakRSS returns the peak resident set size of this process's memory
// image: VmHWM. Unlike ru_maxrss it starts afresh at exec, so a child
// process does not inherit its parent's figure, and resetPeakRSS can start
// it over.
func peakRSS() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return maxRSS()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				break
			}
			return kb << 10
		}
	}
	return maxRSS()
}

// resetPeakRSS sets the peak RSS back to the current RSS, so that a
// scenario's peak is its own. It reports whether it could.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}
