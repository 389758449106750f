package s3tasktest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/kit"
)

// Created is a task found by [RequireCreated], with its arguments decoded.
type Created[T s3task.TaskArgs] struct {
	Task *s3task.Task // the task's record
	Args T            // its payload, decoded
}

// RequireCreated asserts that store holds exactly one task of the type T
// names ([s3task.TaskArgs]), in any status, and returns it with its payload
// decoded into a T. It fails t otherwise, listing the tasks of that type it
// found, or the types it found instead. Use it where the code under test
// creates a task: an HTTP handler, a hook, another task's handler.
func RequireCreated[T s3task.TaskArgs](t testing.TB, store *s3task.Store) Created[T] {
	t.Helper()
	all := RequireCreatedMany[T](t, store)
	if len(all) != 1 {
		ids := make([]string, len(all))
		for i, c := range all {
			ids[i] = c.Task.ID
		}
		t.Fatalf("s3tasktest: want exactly one task of type %q, found %d: %s", typeOf[T](), len(all), strings.Join(ids, ", "))
	}
	return all[0]
}

// RequireCreatedMany asserts that store holds at least one task of the type
// T names and returns them all, newest first, with their payloads decoded.
func RequireCreatedMany[T s3task.TaskArgs](t testing.TB, store *s3task.Store) []Created[T] {
	t.Helper()
	typ := typeOf[T]()
	tasks, err := all(context.Background(), store)
	if err != nil {
		t.Fatalf("s3tasktest: list: %v", err)
	}
	var found []Created[T]
	others := map[string]int{}
	for _, task := range tasks {
		if task.Type != typ {
			others[task.Type]++
			continue
		}
		var args T
		if len(task.Payload) > 0 {
			if err := json.Unmarshal(task.Payload, &args); err != nil {
				t.Fatalf("s3tasktest: task %s of type %q: payload does not decode as %T: %v", task.ID, typ, args, err)
			}
		}
		found = append(found, Created[T]{Task: task, Args: args})
	}
	if len(found) == 0 {
		t.Fatalf("s3tasktest: no task of type %q; tasks by type: %v", typ, others)
	}
	return found
}

// RequireNotCreated asserts that store holds no task of the type T names.
func RequireNotCreated[T s3task.TaskArgs](t testing.TB, store *s3task.Store) {
	t.Helper()
	typ := typeOf[T]()
	tasks, err := all(context.Background(), store)
	if err != nil {
		t.Fatalf("s3tasktest: list: %v", err)
	}
	for _, task := range tasks {
		if task.Type == typ {
			t.Fatalf("s3tasktest: want no task of type %q, found %s (%s)", typ, task.ID, task.Status)
		}
	}
}

// typeOf returns the task type T names.
func typeOf[T s3task.TaskArgs]() string {
	var zero T
	return zero.TaskType()
}

// MakePeriodicRun makes the run of store's periodic task named name
// (StoreOptions.Periodic) for the period that contains at, as the fleet's
// lease holder would when that period begins, and returns its task: with
// the run's key, so a run made already is returned, not made twice. Use it
// to test what a declaration's runs hold, and their handler (with [Run] or
// [Drain]), without a Worker or waiting for a period. It fails t for a
// name store does not declare, or a run that cannot be made.
func MakePeriodicRun(t testing.TB, store *s3task.Store, name string, at time.Time) *s3task.Task {
	t.Helper()
	task, err := kit.MakeRun(kit.Bypass(context.Background()), store, name, at)
	if err != nil {
		t.Fatalf("s3tasktest: periodic run of %q at %s: %v", name, at.Format(time.RFC3339), err)
	}
	return task.(*s3task.Task)
}
