//go:build !linux

package main

// peakRSS returns the peak resident set size of this process so far.
func peakRSS() uint64 { return maxRSS() }

// resetPeakRSS cannot reset the peak here.
func resetPeakRSS() bool { return false }
