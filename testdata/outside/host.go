// Package host is a tiny application that uses s3task as any importer
// would: typed handlers on a Mux, a tenant check written once as Store
// middleware, and an in-memory S3 for development.
package host

import (
	"context"
	"errors"
	"strings"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/mems3"
)

// GreetArgs is the payload of a "greet" task; it names its task type.
type GreetArgs struct {
	Name string `json:"name"`
}

// TaskType makes GreetArgs an s3task.TaskArgs.
func (GreetArgs) TaskType() string { return "greet" }

// Validate refuses a greeting for nobody.
func (a GreetArgs) Validate() error {
	if a.Name == "" {
		return errors.New("name is required")
	}
	return nil
}

// ErrBusy is what the greeter returns the first time it meets a name that
// starts with "busy": it asks for a retry a minute later.
var ErrBusy = errors.New("greeter busy")

// NewMux returns the application's handlers.
func NewMux() (*s3task.Mux, error) {
	var mux s3task.Mux
	err := s3task.HandleArgs(&mux, func(ctx context.Context, job *s3task.Job, args GreetArgs) error {
		if strings.HasPrefix(args.Name, "busy") && job.Task.Attempt == 1 {
			return s3task.RetryAfter(ErrBusy, RetryWait)
		}
		return job.WriteOutput(ctx, strings.NewReader("hello, "+args.Name+"\n"))
	})
	if err != nil {
		return nil, err
	}
	return &mux, nil
}

// RetryWait is how long a busy greeter asks to wait.
const RetryWait = 90_000_000_000 // 90 s

type tenantKey struct{}

// AsTenant returns ctx for calls made on behalf of tenant.
func AsTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// ErrForbidden is what the tenant check answers for another tenant's task.
var ErrForbidden = errors.New("forbidden")

// TenantGuard is the application's one authorisation check: every task is
// created with the caller's tenant, every call on a task (read or write)
// must come from that tenant, and every listing shows only the caller's
// tasks.
func TenantGuard(next s3task.CallFunc) s3task.CallFunc {
	return func(ctx context.Context, c *s3task.Call) (*s3task.Task, error) {
		tenant, _ := ctx.Value(tenantKey{}).(string)
		if tenant == "" {
			return nil, ErrForbidden
		}
		switch {
		case c.Op == s3task.OpCreate:
			meta := map[string]string{"tenant": tenant}
			for k, v := range c.Params.Metadata {
				meta[k] = v
			}
			c.Params.Metadata = meta
		case c.Op == s3task.OpList:
			c.List.Metadata = map[string]string{"tenant": tenant}
		case c.Op == s3task.OpStats:
			return nil, ErrForbidden
		case c.Task != nil && c.Task.Metadata["tenant"] != tenant:
			return nil, ErrForbidden
		}
		return next(ctx, c)
	}
}

// StoreOptions are the options of the application's Stores: the types its
// workers serve, and the tenant check.
func StoreOptions(mux *s3task.Mux) *s3task.StoreOptions {
	return &s3task.StoreOptions{Types: mux.Types(), Middleware: []s3task.StoreMiddleware{TenantGuard}}
}

// DevStore returns a Store on an in-memory S3, for running the application
// on a laptop; close the server when done.
func DevStore(mux *s3task.Mux) (*s3task.Store, *mems3.Server, error) {
	srv, err := mems3.New(nil)
	if err != nil {
		return nil, nil, err
	}
	store, err := s3task.NewStore(srv.Client(), srv.Bucket(), StoreOptions(mux))
	if err != nil {
		srv.Close()
		return nil, nil, err
	}
	return store, srv, nil
}
