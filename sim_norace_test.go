//go:build !race

package s3task_test

// simRace says the test binary was built with the race detector.
const simRace = false
