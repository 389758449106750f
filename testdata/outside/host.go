// Package host is a tiny application that uses s3task as any importer
// would: one typed handler on a Mux.
package host

import (
	"context"
	"errors"
	"strings"

	"github.com/s3task/s3task"
)

// GreetArgs is the payload of a "greet" task.
type GreetArgs struct {
	Name string `json:"name"`
}

// Validate refuses a greeting for nobody.
func (a GreetArgs) Validate() error {
	if a.Name == "" {
		return errors.New("name is required")
	}
	return nil
}

// NewMux returns the application's handlers.
func NewMux() (*s3task.Mux, error) {
	var mux s3task.Mux
	err := s3task.HandleJSON(&mux, "greet", func(ctx context.Context, job *s3task.Job, args GreetArgs) error {
		return job.WriteOutput(ctx, strings.NewReader("hello, "+args.Name+"\n"))
	})
	if err != nil {
		return nil, err
	}
	return &mux, nil
}
