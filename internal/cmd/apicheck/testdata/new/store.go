// Package apifixture is the API after the baseline of apicheck's test:
// Store.Create is gone, Task.Revision is renamed, Version is new.
package apifixture

// Store creates tasks.
type Store struct{}

// CreateForUpload creates a task whose input is uploaded later.
func (s *Store) CreateForUpload(name string) (*Task, error) { return &Task{ID: name}, nil }

// Task is a task's record.
type Task struct {
	ID  string
	Rev int64
}

// Version is the fixture's version.
const Version = "0.2.0"
