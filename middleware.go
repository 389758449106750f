package s3task

import (
	"context"
	"fmt"
	"time"
)

// Middleware wraps the [Handler] of every attempt a [Worker] runs, the way
// net/http middleware wraps an http.Handler: it gets the next handler and
// returns one that calls it, with the host's own code around the call, such
// as a trace span, log attributes from the task's metadata, a timer, or a
// credential put into the context.
//
// WorkerOptions.Middleware lists them outermost first: for [m1, m2] an
// attempt runs m1's code, then m2's, then the handler, and the handler's
// error comes back through m2, then m1; the error m1 returns is the
// attempt's result, as the worker records it. All of it runs inside the
// attempt: after the claim, under the lease and its heartbeats, with the
// attempt's context, which ends as the handler's would. A panic, in the
// handler or in a middleware, passes up through the middleware outside it
// (a deferred recover there sees it) and is recovered by the worker,
// outside them all, as the handler's panic.
//
// Middleware does not change which tasks a worker claims: that is decided
// by the handler given to [NewWorker] (see [TypedHandler]).
type Middleware func(next Handler) Handler

// wrap returns h inside mw, mw[0] outermost.
func wrap(h Handler, mw []Middleware) (Handler, error) {
	for i := len(mw) - 1; i >= 0; i-- {
		if mw[i] == nil {
			return nil, fmt.Errorf("%w: WorkerOptions.Middleware[%d] is nil", ErrInvalidOptions, i)
		}
		if h = mw[i](h); h == nil {
			return nil, fmt.Errorf("%w: WorkerOptions.Middleware[%d] returned a nil Handler", ErrInvalidOptions, i)
		}
	}
	return h, nil
}

// Op names a [Store] call that passes through [StoreMiddleware].
type Op string

// The Store calls that pass through StoreMiddleware: those that create a
// task or change its state. [Store.CreateForUpload] is an OpCreate.
const (
	OpCreate   Op = "create"   // Store.Create
	OpSubmit   Op = "submit"   // Store.Submit
	OpCancel   Op = "cancel"   // Store.Cancel
	OpRetry    Op = "retry"    // Store.Retry
	OpSchedule Op = "schedule" // Store.Schedule
)

// Call is one Store call as [StoreMiddleware] sees it: the call's name and
// arguments. A middleware may change the arguments before it passes the
// call on, e.g. add entries to a copy of Params.Metadata; the Store
// validates them after every middleware has run.
type Call struct {
	// Op is the Store method called.
	Op Op
	// TaskID is the task the call is for; empty for OpCreate, whose task's
	// ID is that of the Task returned.
	TaskID string
	// Params are OpCreate's parameters; nil for every other Op. Params.Metadata
	// is the caller's own map: copy it before adding to it.
	Params *CreateParams
	// Reason is OpCancel's reason.
	Reason string
	// At is OpSchedule's start time.
	At time.Time
	// Found is set by the Store when an OpCreate returns: true when its
	// Params.Key named a task an earlier call made, which the call returned
	// as it is, writing nothing (see [Store.CreateOrGet]). A middleware
	// reads it after next returns, to log a repeat as a repeat.
	Found bool
}

// CallFunc performs a [Call] and returns what the Store method returns.
type CallFunc func(ctx context.Context, c *Call) (*Task, error)

// StoreMiddleware wraps the Store calls that create or change a task (see
// [Op]), as [Middleware] wraps a worker's attempts: it gets the next
// CallFunc and returns one that calls it, for a trace span, an audit log,
// an authorisation check, or metadata every task should carry. It runs on
// the caller's goroutine, with the caller's context; a panic is not
// recovered. A middleware that returns without calling next refuses the
// call, and the Store method returns its error.
//
// StoreOptions.Middleware lists them outermost first, as for Middleware.
type StoreMiddleware func(next CallFunc) CallFunc

// chainCalls returns do inside mw, mw[0] outermost.
func chainCalls(do CallFunc, mw []StoreMiddleware) (CallFunc, error) {
	for i := len(mw) - 1; i >= 0; i-- {
		if mw[i] == nil {
			return nil, fmt.Errorf("%w: StoreOptions.Middleware[%d] is nil", ErrInvalidOptions, i)
		}
		if do = mw[i](do); do == nil {
			return nil, fmt.Errorf("%w: StoreOptions.Middleware[%d] returned a nil CallFunc", ErrInvalidOptions, i)
		}
	}
	return do, nil
}

// perform carries out a call once every middleware has passed it on.
func (s *Store) perform(ctx context.Context, c *Call) (*Task, error) {
	switch c.Op {
	case OpCreate:
		if c.Params == nil {
			return nil, invalidArg("create call without Params")
		}
		return s.create(ctx, c)
	case OpSubmit:
		return s.submit(ctx, c.TaskID)
	case OpCancel:
		return s.cancel(ctx, c.TaskID, c.Reason)
	case OpRetry:
		return s.retry(ctx, c.TaskID)
	case OpSchedule:
		return s.schedule(ctx, c.TaskID, c.At)
	}
	return nil, invalidArg("unknown store call %q", c.Op)
}
