// Package sub is removed after the baseline.
package sub

// Hello greets.
func Hello() string { return "hello" }
