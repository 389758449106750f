package s3task_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

// A handler's own counters reach the record with the attempt's result, a
// failed attempt's included, and the next attempt starts with none.
func TestCountersReachTheRecord(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, nil)
	h := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		if err := job.SetCounter("pages", 12); err != nil {
			return err
		}
		if job.Task.Attempt == 1 {
			if err := job.SetCounter("images.resized", 3); err != nil {
				return err
			}
			return errors.New("printer jam")
		}
		return job.SetCounter("pages", 40) // set again: the last value counts
	})
	task := s3tasktest.Submit(t, store, s3task.CreateParams{}, []byte("x"))
	first := s3tasktest.Run(t, store, h, task.ID)
	if first.Task.Status != s3task.StatusFailed || first.Task.Counters["pages"] != 12 || first.Task.Counters["images.resized"] != 3 {
		t.Fatalf("failed attempt: %s with counters %v, want pages 12 and images.resized 3", first.Task.Status, first.Task.Counters)
	}
	got, err := store.Get(context.Background(), task.ID)
	if err != nil || len(got.Counters) != 2 {
		t.Fatalf("record after the failure: %v, %v", got.Counters, err)
	}
	if _, err := store.Retry(context.Background(), task.ID); err != nil {
		t.Fatal(err)
	}
	second := s3tasktest.Run(t, store, h, task.ID)
	if second.Task.Status != s3task.StatusCompleted || len(second.Task.Counters) != 1 || second.Task.Counters["pages"] != 40 {
		t.Errorf("second attempt: %s with counters %v, want only pages 40", second.Task.Status, second.Task.Counters)
	}
	body, _ := s3.Object(store.Prefix() + task.ID + "/status.json")
	if !strings.Contains(string(body), `"counters":{"pages":40}`) {
		t.Errorf("the record does not keep the counters as \"counters\": %s", body)
	}
}

// SetCounter refuses a name that is not valid and a seventeenth name,
// keeps what was set before, and still updates a name already set.
func TestSetCounterRefusesBadInput(t *testing.T) {
	store := s3tasktest.NewStore(t, nil)
	var errs []error
	h := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		for _, name := range []string{"", "has space", strings.Repeat("x", s3task.MaxMetadataKeyLen+1), "ünï"} {
			errs = append(errs, job.SetCounter(name, 1))
		}
		for i := range s3task.MaxCounters {
			if err := job.SetCounter(fmt.Sprintf("c%02d", i), int64(i)); err != nil {
				return err
			}
		}
		errs = append(errs, job.SetCounter("one.too.many", 1))
		return job.SetCounter("c00", 100)
	})
	task := s3tasktest.Submit(t, store, s3task.CreateParams{}, []byte("x"))
	res := s3tasktest.Run(t, store, h, task.ID)
	for i, err := range errs {
		if !errors.Is(err, s3task.ErrInvalidArgument) {
			t.Errorf("bad counter %d: %v, want ErrInvalidArgument", i, err)
		}
	}
	if res.Err != nil || len(res.Task.Counters) != s3task.MaxCounters || res.Task.Counters["c00"] != 100 || res.Task.Counters["one.too.many"] != 0 {
		t.Errorf("counters %v (handler error %v); want the %d valid ones, c00 updated", res.Task.Counters, res.Err, s3task.MaxCounters)
	}
}
