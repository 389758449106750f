// Package apifixture is the API at the baseline of apicheck's test.
package apifixture

// Store creates tasks.
type Store struct{}

// Create creates a task.
func (s *Store) Create(name string) (*Task, error) { return &Task{ID: name}, nil }

// CreateForUpload creates a task whose input is uploaded later.
func (s *Store) CreateForUpload(name string) (*Task, error) { return &Task{ID: name}, nil }

// Task is a task's record.
type Task struct {
	ID       string
	Revision int64
}
