//go:build !unix

package main

import "os"

// maxRSS is not available here.
func maxRSS() uint64 { return 0 }

// childRSS is not available here.
func childRSS(*os.ProcessState) uint64 { return 0 }
