// Package extra is new after the baseline.
package extra

// Hello greets.
func Hello() string { return "hello" }
