package s3task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
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
//
// A Handler that also implements [TypedHandler] is offered only the task
// types it lists; any other Handler is offered every task.
type Handler interface {
	// Work runs one attempt of job's task; nil completes the task.
	Work(ctx context.Context, job *Job) error
}

// TypedHandler is a [Handler] that declares the task types (Task.Type) it
// serves. A [Worker] whose handler is a TypedHandler claims only tasks of
// those types: a task of any other type stays queued, untouched, for a
// worker that serves it, which is what a rolling deploy needs when new
// workers learn a type the old ones do not know. [Store.Stats] counts
// unfinished tasks by type, so a type nobody serves shows there.
//
// The worker asks Types each time it considers a task, so a handler may
// add types while the worker runs. A [Mux] is a TypedHandler.
type TypedHandler interface {
	Handler
	// Types lists the task types the handler serves.
	Types() []string
}

// HandlerFunc adapts a function to a [Handler] that serves every task type.
type HandlerFunc func(ctx context.Context, job *Job) error

// Work calls f(ctx, job).
func (f HandlerFunc) Work(ctx context.Context, job *Job) error { return f(ctx, job) }

// ErrUnknownTaskType is what [Mux.Work] fails a task with when no handler is
// registered for its type; the failure is permanent, with the category
// [CategoryUnknownType]. A worker whose handler is the Mux itself never
// claims such a task; this happens only when the Mux is wrapped in a
// handler that does not declare its types.
var ErrUnknownTaskType = errors.New("s3task: no handler for task type")

// Mux routes jobs to handlers by task type (Task.Type). The zero value is
// an empty Mux ready to use, and a *Mux is itself a [TypedHandler]: give it
// to [NewWorker] as it is, and the worker claims only the types registered
// on it. A Mux is safe for concurrent use.
type Mux struct {
	mu       sync.RWMutex
	handlers map[string]Handler
}

// NewMux returns an empty Mux; new(Mux) is the same.
func NewMux() *Mux { return new(Mux) }

// maxTypeLen bounds a task type's length, here and in [CreateParams].
const maxTypeLen = 128

// Handle registers h for taskType. Registering a type twice, a nil handler,
// an empty type or one longer than 128 bytes returns an error wrapping
// [ErrInvalidArgument]; the first registration stays.
func (m *Mux) Handle(taskType string, h Handler) error {
	if h == nil {
		return invalidArg("nil handler for task type %q", taskType)
	}
	if taskType == "" || len(taskType) > maxTypeLen {
		return invalidArg("task type must be 1 to %d bytes, got %d", maxTypeLen, len(taskType))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.handlers[taskType]; dup {
		return invalidArg("task type %q already has a handler", taskType)
	}
	if m.handlers == nil {
		m.handlers = map[string]Handler{}
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

// Work runs the handler registered for job.Task.Type. A task of a type with
// no handler fails permanently with [ErrUnknownTaskType].
func (m *Mux) Work(ctx context.Context, job *Job) error {
	m.mu.RLock()
	h, ok := m.handlers[job.Task.Type]
	m.mu.RUnlock()
	if !ok {
		return Permanent(WithCategory(fmt.Errorf("%w %q", ErrUnknownTaskType, job.Task.Type), CategoryUnknownType))
	}
	return h.Work(ctx, job)
}

// Types returns the registered task types, sorted.
func (m *Mux) Types() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	types := make([]string, 0, len(m.handlers))
	for t := range m.handlers {
		types = append(types, t)
	}
	slices.Sort(types)
	return types
}

// serves reports whether m has a handler for taskType, without building
// the list Types returns.
func (m *Mux) serves(taskType string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	_, ok := m.handlers[taskType]
	return ok
}

// serves reports whether h takes tasks of taskType.
func serves(h Handler, taskType string) bool {
	switch h := h.(type) {
	case *Mux:
		return h.serves(taskType)
	case TypedHandler:
		return slices.Contains(h.Types(), taskType)
	}
	return true
}

// Validator is implemented by payload types that check themselves. [Store.Create]
// calls Validate on CreateParams.Args, and a handler registered with
// [HandleJSON] on the decoded payload, before anything else happens.
type Validator interface {
	// Validate returns an error that says what is wrong, or nil.
	Validate() error
}

// TaskArgs is implemented by argument types that name their task type, so
// the type is written once, on the type: [Store.Create] takes
// CreateParams.Type from CreateParams.Args, and [HandleArgs] registers the
// handler under it. TaskType must return the same string for every value,
// the zero value included, and may have a value or a pointer receiver.
type TaskArgs interface {
	// TaskType returns the task type (Task.Type) of tasks with these
	// arguments: 1 to 128 bytes of UTF-8.
	TaskType() string
}

// HandleArgs registers fn on m for the task type T names ([TaskArgs]): it
// is [HandleJSON] with the type taken from T, so that a task created with
// CreateParams{Args: T{...}} reaches fn with no type string in between.
// Errors: as [Mux.Handle], and [ErrInvalidArgument] if T's TaskType panics
// on the zero value.
func HandleArgs[T TaskArgs](m *Mux, fn func(ctx context.Context, job *Job, args T) error) error {
	var zero T
	typ, ok, err := argsType(zero)
	if err != nil {
		return err
	}
	if !ok {
		return invalidArg("%T names no task type", zero)
	}
	return HandleJSON(m, typ, fn)
}

// argsType returns the task type v names, if v, or a pointer to a copy of
// it, implements [TaskArgs]. A TaskType that panics (a nil pointer's, say)
// is an error.
func argsType(v any) (typ string, ok bool, err error) {
	ta, ok := as[TaskArgs](v)
	if !ok {
		return "", false, nil
	}
	defer func() {
		if p := recover(); p != nil {
			typ, ok, err = "", false, invalidArg("%T.TaskType panicked: %v", v, p)
		}
	}()
	return ta.TaskType(), true, nil
}

// as returns v as an I if v, or a pointer to a copy of it, implements I,
// so that methods with a pointer receiver count too.
func as[I any](v any) (I, bool) {
	if i, ok := v.(I); ok {
		return i, true
	}
	var none I
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || rv.Kind() == reflect.Pointer {
		return none, false
	}
	p := reflect.New(rv.Type())
	p.Elem().Set(rv)
	i, ok := p.Interface().(I)
	return i, ok
}

// HandleJSON registers fn on m for taskType, with the task's payload decoded
// from JSON into a T: the typed counterpart of [CreateParams.Args]. A
// missing payload decodes as T's zero value. If T (or *T) implements
// [Validator], the decoded value is validated too. A payload that does not
// decode, or is not valid, fails the attempt permanently, with category
// [CategoryBadPayload] and a last_error that names the type and the
// problem; fn is not called.
//
// Decoding is lenient as encoding/json is: fields T does not know are
// ignored, so producers may add fields before every worker knows them.
//
// If T names a task type ([TaskArgs]), taskType must be that type, or
// empty for it ([HandleArgs] says so shorter).
func HandleJSON[T any](m *Mux, taskType string, fn func(ctx context.Context, job *Job, args T) error) error {
	var zero T
	named, ok, err := argsType(zero)
	switch {
	case err != nil:
		return err
	case ok && taskType == "":
		taskType = named
	case ok && named != taskType:
		return invalidArg("task type %q for %T, which names task type %q", taskType, zero, named)
	}
	if fn == nil {
		return invalidArg("nil handler for task type %q", taskType)
	}
	return m.Handle(taskType, HandlerFunc(func(ctx context.Context, job *Job) error {
		var args T
		if err := decodeArgs(job.Task.Payload, &args); err != nil {
			return Permanent(WithCategory(fmt.Errorf("payload of task type %q: %w", job.Task.Type, err), CategoryBadPayload))
		}
		return fn(ctx, job, args)
	}))
}

// decodeArgs decodes a payload into *v and validates it.
func decodeArgs(payload json.RawMessage, v any) error {
	if len(payload) > 0 {
		if err := json.Unmarshal(payload, v); err != nil {
			return fmt.Errorf("does not decode as %T: %w", v, err)
		}
	}
	return validate(v)
}

// validate calls Validate on v if v, or a pointer to a copy of it, has one.
func validate(v any) error {
	if val, ok := as[Validator](v); ok {
		return val.Validate()
	}
	return nil
}
