package s3task

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Handler processes one attempt of a task. Returning nil completes the task;
// returning an error fails the attempt, and the worker retries it after a
// backoff while attempts are left, unless the error was made by [Permanent]
// ([RetryAfter] picks the wait). A panic counts as an error.
//
// ctx is cancelled when the worker stops holding the task; context.Cause(ctx)
// then says why: [ErrTaskCanceled], [ErrLeaseLost] or [ErrWorkerStopping].
// After that nothing the handler does reaches the task's record.
type Handler interface {
	Handle(ctx context.Context, job *Job) error
}

// HandlerFunc adapts a function to a [Handler].
type HandlerFunc func(ctx context.Context, job *Job) error

// Handle calls f(ctx, job).
func (f HandlerFunc) Handle(ctx context.Context, job *Job) error { return f(ctx, job) }

// ErrUnknownTaskType is what [Mux.Dispatch] fails a task with when no handler
// is registered for its type; the failure is permanent.
var ErrUnknownTaskType = errors.New("s3task: no handler for task type")

// Mux dispatches jobs to handlers by task type (Task.Type). Register
// handlers before the worker starts; a Mux is safe for concurrent use. Pass
// it to a worker as HandlerFunc(mux.Dispatch).
type Mux struct {
	mu       sync.RWMutex
	handlers map[string]Handler
}

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{handlers: map[string]Handler{}} }

// Handle registers h for taskType. Registering a type twice, a nil handler
// or a type longer than 128 bytes returns an error wrapping
// [ErrInvalidArgument]; the first registration stays.
func (m *Mux) Handle(taskType string, h Handler) error {
	if h == nil {
		return invalidArg("nil handler for task type %q", taskType)
	}
	if len(taskType) > 128 {
		return invalidArg("task type longer than 128 bytes")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.handlers[taskType]; dup {
		return invalidArg("task type %q already has a handler", taskType)
	}
	m.handlers[taskType] = h
	return nil
}

// HandleFunc registers f for taskType; see [Mux.Handle].
func (m *Mux) HandleFunc(taskType string, f func(ctx context.Context, job *Job) error) error {
	if f == nil {
		return invalidArg("nil handler for task type %q", taskType)
	}
	return m.Handle(taskType, HandlerFunc(f))
}

// Dispatch runs the handler registered for job.Task.Type. A task of a type
// with no handler fails permanently with [ErrUnknownTaskType].
func (m *Mux) Dispatch(ctx context.Context, job *Job) error {
	m.mu.RLock()
	h, ok := m.handlers[job.Task.Type]
	m.mu.RUnlock()
	if !ok {
		return Permanent(fmt.Errorf("%w %q", ErrUnknownTaskType, job.Task.Type))
	}
	return h.Handle(ctx, job)
}
