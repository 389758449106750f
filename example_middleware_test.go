package s3task_test

import (
	"context"
	"fmt"
	"log"
	"maps"
	"time"

	"github.com/s3task/s3task"
)

// Middleware wraps every attempt: here one that reads the tenant the
// producer put in the task's metadata and reports each attempt's result,
// and one that gives every handler a deadline. The first listed is the
// outermost.
func ExampleMiddleware() {
	store, _ := exampleStore(nil)
	task := queueTask(store, s3task.CreateParams{
		Name:     "monthly report",
		Metadata: map[string]string{"tenant": "acme"},
	}, "rows")

	report := func(next s3task.Handler) s3task.Handler {
		return s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
			err := next.Work(ctx, job)
			fmt.Printf("tenant %s, task %q, attempt %d: error %v\n",
				job.Task.Metadata["tenant"], job.Task.Name, job.Task.Attempt, err)
			return err
		})
	}
	deadline := func(next s3task.Handler) s3task.Handler {
		return s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
			defer cancel()
			return next.Work(ctx, job)
		})
	}
	handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		if _, ok := ctx.Deadline(); !ok {
			return fmt.Errorf("no deadline")
		}
		return nil
	})

	worker, err := s3task.NewWorker(store, handler, &s3task.WorkerOptions{
		Middleware: []s3task.Middleware{report, deadline},
	})
	if err != nil {
		log.Fatal(err)
	}
	done, err := worker.RunTask(context.Background(), task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(done.Status)
	// Output:
	// tenant acme, task "monthly report", attempt 1: error <nil>
	// completed
}

type tenantKey struct{}

// StoreMiddleware wraps the calls that create or change a task: here one
// that stamps every new task with the tenant of the request that made it,
// taken from the context, so that no handler of the host can forget to.
func ExampleStoreMiddleware() {
	stampTenant := func(next s3task.CallFunc) s3task.CallFunc {
		return func(ctx context.Context, c *s3task.Call) (*s3task.Task, error) {
			if tenant, ok := ctx.Value(tenantKey{}).(string); ok && c.Op == s3task.OpCreate {
				md := maps.Clone(c.Params.Metadata) // the caller's map is not ours to change
				if md == nil {
					md = map[string]string{}
				}
				md["tenant"] = tenant
				c.Params.Metadata = md
			}
			return next(ctx, c)
		}
	}
	store, _ := exampleStore(&s3task.StoreOptions{Middleware: []s3task.StoreMiddleware{stampTenant}})

	ctx := context.WithValue(context.Background(), tenantKey{}, "acme")
	task, err := store.Create(ctx, s3task.CreateParams{Name: "import"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Metadata["tenant"])
	// Output: acme
}
