package main

// Scenario 7: the buckets its runs start from, seeded without the library
// where it can be done faster.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

// fleetEnv is an env whose in-process backend can be seeded directly.
type fleetEnv struct {
	*env
	mem *s3mem.Backend // nil against -endpoint
}

// openFleetEnv starts a fresh in-process S3 for one run (or a prefix of the
// -endpoint bucket), keeping hold of its backend.
func openFleetEnv(cfg *config, name string) (*fleetEnv, error) {
	if cfg.endpoint != "" {
		e, err := openEnv(cfg, name)
		return &fleetEnv{env: e}, err
	}
	mem := s3mem.New()
	srv, err := s3test.StartBackend(mem)
	if err != nil {
		return nil, err
	}
	return &fleetEnv{
		env: &env{cfg: cfg, srv: srv, endpoint: srv.URL, bucket: srv.Bucket, prefix: "bench/" + name + "/", log: quietLogger()},
		mem: mem,
	}, nil
}

// freeMemory returns the heap of a finished run to the OS, so that the
// process's peak is that of its largest run, not of two.
func freeMemory() { debug.FreeOSMemory() }

// seedObject is one object to write before a run.
type seedObject struct {
	key  string
	body []byte
}

// seed writes the objects gen returns for 0 <= i < n: straight into the
// in-process backend (no request, so no count, and a hundred times faster
// than over HTTP), or through an S3 client 64 at a time against -endpoint.
func (e *fleetEnv) seed(ctx context.Context, n int, gen func(i int) ([]seedObject, error)) error {
	if e.mem != nil {
		for i := range n {
			objs, err := gen(i)
			if err != nil {
				return err
			}
			for _, o := range objs {
				meta := map[string]string{}
				if len(o.body) > 0 {
					meta["Content-Type"] = "application/json"
				}
				if _, err := e.mem.PutObject(e.bucket, o.key, meta, bytes.NewReader(o.body), int64(len(o.body)), nil); err != nil {
					return fmt.Errorf("seed %s: %w", o.key, err)
				}
			}
			if i%1000 == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
		}
		return nil
	}
	objects := e.objects(e.client())
	jobs := make(chan int)
	errs := make(chan error, 64)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := range jobs {
				objs, err := gen(i)
				for _, o := range objs {
					if err != nil {
						break
					}
					_, err = objects.Put(ctx, o.key, o.body)
				}
				if err != nil {
					offer(errs, err)
				}
			}
		})
	}
	for i := 0; i < n && ctx.Err() == nil && len(errs) == 0; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return ctx.Err()
	}
}

// template queues one real task through the library (Create, UploadInput,
// Submit) under e.prefix+"template/" and returns its record, read back raw:
// the base of every clone.
func (e *fleetEnv) template(ctx context.Context) (map[string]any, error) {
	s, err := e.store(e.client(), "template", nil)
	if err != nil {
		return nil, err
	}
	id, err := prepare(ctx, s, "template")
	if err != nil {
		return nil, err
	}
	if _, err := s.Submit(ctx, id); err != nil {
		return nil, err
	}
	body, _, err := e.objects(e.client()).Get(ctx, s.Prefix()+id+"/status.json")
	if err != nil {
		return nil, err
	}
	var base map[string]any
	if err := json.Unmarshal(body, &base); err != nil {
		return nil, err
	}
	if base["status"] != string(s3task.StatusQueued) {
		return nil, fmt.Errorf("template task is %v, want queued", base["status"])
	}
	return base, nil
}

// cloneRecord returns a copy of the record base for a new task submitted at
// due (created a second before), with an ID from s3task.NewIDAt, under
// prefix.
func cloneRecord(base map[string]any, prefix string, i int, due time.Time) (id string, body []byte, err error) {
	created := due.Add(-time.Second)
	id = s3task.NewIDAt(created)
	rec := make(map[string]any, len(base))
	for k, v := range base {
		rec[k] = v
	}
	rec["task_id"] = id
	rec["task_name"] = fmt.Sprintf("clone %d", i)
	rec["input_object_path"] = prefix + id + "/input.csv"
	rec["created_at"] = created.UTC().Format(time.RFC3339Nano)
	rec["updated_at"] = due.UTC().Format(time.RFC3339Nano)
	rec["due_at"] = due.UTC().Format(time.RFC3339Nano)
	rec["revision"] = randHex(8)
	body, err = json.Marshal(rec)
	return id, body, err
}

// designTag names design in the names of its runs.
func designTag(design string) string {
	if design == designOld {
		return "old"
	}
	return "new"
}

// markerFor returns the key of a queued task's marker in the design.
func markerFor(design, prefix string, due time.Time, id string) string {
	if design == designOld {
		return prefix + "active/" + id
	}
	return prefix + "active/" + due.UTC().Format(markerLayout) + "_" + id
}

// seedQueue seeds n queued tasks under prefix with the design's markers,
// task i submitted at dueOf(i) (whole milliseconds), and returns each
// task's due time by ID.
func (e *fleetEnv) seedQueue(ctx context.Context, design, prefix string, n int, dueOf func(i int) time.Time) (map[string]time.Time, error) {
	base, err := e.template(ctx)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	due := make(map[string]time.Time, n)
	err = e.seed(ctx, n, func(i int) ([]seedObject, error) {
		at := dueOf(i).Truncate(time.Millisecond)
		id, body, err := cloneRecord(base, prefix, i, at)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		due[id] = at
		mu.Unlock()
		return []seedObject{{prefix + id + "/status.json", body}, {markerFor(design, prefix, at, id), nil}}, nil
	})
	return due, err
}
