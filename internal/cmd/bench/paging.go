package main

// Scenario 5: the cost of a List page as the bucket grows.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task"
)

const pageLimit = 50

type pageRow struct {
	size      int
	fill      time.Duration // writing the records added for this size
	added     int
	perPage   []counts // one per page read, first pages and next pages alike
	first     []time.Duration
	next      []time.Duration
	tasksSeen int // tasks on the last first page read
	broken    int // broken records seen on any page
}

// requests returns the requests of every page read, as "LIST=1 GET=50",
// deduplicated: a single entry means every page cost the same.
func (r pageRow) requests() []string {
	var out []string
	for _, c := range r.perPage {
		s := ""
		for _, k := range kinds {
			if v := c.kinds[k]; v != 0 {
				if s != "" {
					s += " "
				}
				s += fmt.Sprintf("%s=%d", k, v)
			}
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

type pagingResult struct {
	cfg   *config
	where string
	rows  []pageRow
}

func runPaging(ctx context.Context, e *env, log io.Writer) (result, error) {
	cfg := e.cfg
	res := &pagingResult{cfg: cfg, where: e.where()}
	m := newMeter()
	store, err := e.store(e.client(m.wrap), "tasks", nil)
	if err != nil {
		return nil, err
	}
	raw := e.client()
	objects := e.objects(raw)

	// One real task, read back raw, is the template of every clone.
	first, err := store.Create(ctx, s3task.CreateParams{Name: "template", Type: "bench", CreatedBy: "bench"})
	if err != nil {
		return nil, err
	}
	tmpl, _, err := objects.Get(ctx, store.Prefix()+first.ID+"/status.json")
	if err != nil {
		return nil, err
	}
	have := 1
	sizes := slices.Clone(cfg.pageSizes)
	slices.Sort(sizes)
	for _, size := range sizes {
		row := pageRow{size: size}
		if size > have {
			start := time.Now()
			if err := fillTasks(ctx, raw, e.bucket, store.Prefix(), tmpl, have, size); err != nil {
				return nil, err
			}
			row.fill, row.added = time.Since(start), size-have
			have = size
		}
		fmt.Fprintf(log, "bench: paging: %d tasks in the bucket\n", have)
		for range cfg.pageReps {
			before := m.snapshot()
			t0 := time.Now()
			page, err := store.List(ctx, s3task.ListOptions{Limit: pageLimit})
			if err != nil {
				return nil, err
			}
			row.first = append(row.first, time.Since(t0))
			mid := m.snapshot()
			row.perPage = append(row.perPage, mid.minus(before))
			row.tasksSeen = len(page.Tasks)
			row.broken += len(page.Broken)
			if page.NextCursor == "" {
				continue
			}
			t0 = time.Now()
			page2, err := store.List(ctx, s3task.ListOptions{Limit: pageLimit, Cursor: page.NextCursor})
			if err != nil {
				return nil, err
			}
			row.next = append(row.next, time.Since(t0))
			row.perPage = append(row.perPage, m.snapshot().minus(mid))
			row.broken += len(page2.Broken)
		}
		res.rows = append(res.rows, row)
	}
	return res, nil
}

// fillTasks writes records for tasks from index have up to size (the
// template is task 0), cloned from tmpl with new IDs made for times one
// second apart going back from now, from many goroutines with raw PUTs.
func fillTasks(ctx context.Context, c *s3.Client, bucket, prefix string, tmpl []byte, have, size int) error {
	var base map[string]any
	if err := json.Unmarshal(tmpl, &base); err != nil {
		return err
	}
	now := time.Now().Add(-time.Minute)
	jobs := make(chan int)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := putClone(ctx, c, bucket, prefix, base, now.Add(-time.Duration(i)*time.Second), i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := have; i < size; i++ {
		if ctx.Err() != nil {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%d records failed, first: %w", len(errs), errs[0])
	}
	return ctx.Err()
}

func putClone(ctx context.Context, c *s3.Client, bucket, prefix string, base map[string]any, at time.Time, i int) error {
	id := s3task.NewIDAt(at)
	rec := make(map[string]any, len(base))
	for k, v := range base {
		rec[k] = v
	}
	stamp := at.UTC().Format(time.RFC3339Nano)
	rec["task_id"] = id
	rec["task_name"] = fmt.Sprintf("clone %d", i)
	rec["input_object_path"] = prefix + id + "/input.csv"
	rec["created_at"], rec["updated_at"] = stamp, stamp
	rec["revision"] = randHex(8)
	body, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	_, err = c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &bucket, Key: aws.String(prefix + id + "/status.json"),
		Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
		ContentType: aws.String("application/json"), IfNoneMatch: aws.String("*"),
	})
	return err
}

// sameRequests reports whether every page of every bucket size cost the
// same requests, and what they were.
func (r *pagingResult) sameRequests() (string, error) {
	var all []string
	for _, row := range r.rows {
		for _, s := range row.requests() {
			if !slices.Contains(all, s) {
				all = append(all, s)
			}
		}
	}
	if len(all) != 1 {
		return "", fmt.Errorf("pages cost different requests: %v", all)
	}
	return all[0], nil
}

func (r *pagingResult) tables() []*table {
	t := newTable(fmt.Sprintf("Scenario 5: one page of %d tasks as the bucket grows", pageLimit),
		"tasks in the bucket", "requests per page", "first page p50", "next page p50", "p99 (all pages)", "p50 vs smallest bucket", "records added", "fill rate", "tasks on page", "broken")
	var base time.Duration
	for i, row := range r.rows {
		p50 := percentile(row.first, 50)
		if i == 0 {
			base = p50
		}
		ratio := "n/a"
		if base > 0 {
			ratio = fmt.Sprintf("%.2f×", float64(p50)/float64(base))
		}
		rate := "-"
		if row.added > 0 {
			rate = fmt.Sprintf("%.0f/s", float64(row.added)/row.fill.Seconds())
		}
		t.add(row.size, strings.Join(row.requests(), " / "), p50, percentile(row.next, 50),
			percentile(append(slices.Clone(row.first), row.next...), 99), ratio, row.added, rate, row.tasksSeen, row.broken)
	}
	if s, err := r.sameRequests(); err == nil {
		t.note("Every page at every size cost the same: %s (target: 1 LIST + %d GET, whatever the bucket holds).", s, pageLimit)
	} else {
		t.note("**%v**", err)
	}
	t.note("Against %s. Records are clones of one task made by Store.Create, with IDs from NewIDAt one second apart, written by raw PUTs from 64 goroutines; each page is read %d times, first page and the next one through its cursor.", r.where, r.cfg.pageReps)
	t.note("gofakes3 keeps keys in a skip list, so a LIST seeks and stops after the page, like S3: the latency ratio shows the library does no per-bucket work. Latencies are loopback times, noisy at this scale; the request counts are the result.")
	return []*table{t}
}
