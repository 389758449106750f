// Package hidden is internal: its changes are not the API's.
package hidden

// Secret is removed after the baseline, which is no incompatible change.
func Secret() {}
