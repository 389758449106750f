// Package kit lets the test kit (package s3tasktest) reach three things of
// a Store that hosts cannot.
//
// Exact tells a Store that its clock is the S3 server's own. A Store
// otherwise learns the server's clock from the Date headers of the
// responses, which have a resolution of one second, and so judges a start
// or a retry due up to a second late; in the kit, whose in-memory S3 and
// Stores share one process, that second would make Advance(d) by exactly a
// task's wait fall short.
//
// Bypass marks a context whose Store calls skip StoreOptions.Middleware:
// the kit's own reads (the listings Drain works from, the output Run
// returns, the tasks RequireCreated finds) are the worker's and the test's,
// not a host caller's, and a tenant check in the host's middleware must not
// refuse them.
//
// MakeRun makes a periodic task's run as the fleet's lease holder would,
// for a test that checks what the runs hold without waiting for a period.
package kit

import (
	"context"
	"time"
)

// Exact makes store, a *s3task.Store whose StoreOptions.Clock reads the S3
// server's clock, take that clock as exact and ignore Date headers. Package
// s3task sets it when it is initialised.
var Exact func(store any)

// MakeRun makes, on store (a *s3task.Store), the run of its periodic task
// named name for the period that contains at, as the fleet's lease holder
// would, and returns the run's *s3task.Task. Package s3task sets it when
// it is initialised.
var MakeRun func(ctx context.Context, store any, name string, at time.Time) (any, error)

type bypassKey struct{}

// Bypass returns ctx marked so that Store calls made with it skip the
// Store's middleware.
func Bypass(ctx context.Context) context.Context { return context.WithValue(ctx, bypassKey{}, true) }

// Bypassed reports whether ctx was marked by Bypass.
func Bypassed(ctx context.Context) bool { return ctx.Value(bypassKey{}) != nil }
