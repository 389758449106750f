package main

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/taskview"
)

// The operator's overview, workers and periodic tasks views: GET /stats
// counts the tasks of a span of time with Store.Stats, GET /workers lists
// the workers that announce themselves with Store.Workers, GET /periodics
// the periodic tasks with Store.Periodics. The page draws its dashboard
// and charts from them.

// statsSpan is a value of GET /stats?span=: how far back the count goes,
// and the length of the timeline's buckets.
type statsSpan struct {
	name     string
	buckets  int           // how many buckets, the current one included
	interval time.Duration // each bucket's length
}

// statsSpans are the spans GET /stats takes. Buckets are aligned as
// time.Truncate aligns them: on the hour, or on UTC midnight for a day.
var statsSpans = []statsSpan{
	{"1h", 12, 5 * time.Minute},
	{"24h", 24, time.Hour},
	{"7d", 7, 24 * time.Hour},
	{"30d", 30, 24 * time.Hour},
}

// defaultSpan is the span of GET /stats without span=.
const defaultSpan = "24h"

// since returns the start of the span's oldest bucket, for a span that
// ends now: the count covers whole buckets only.
func (s statsSpan) since(now time.Time) time.Time {
	return now.Truncate(s.interval).Add(-time.Duration(s.buckets-1) * s.interval)
}

func statsSpanNames() string {
	names := make([]string, len(statsSpans))
	for i, s := range statsSpans {
		names[i] = s.name
	}
	return strings.Join(names, ", ")
}

// statsResponse is the answer of GET /stats. Its counts cover the tasks
// created since Since, newest first, at most MaxTasks of them.
type statsResponse struct {
	Span            string    `json:"span"`
	IntervalSeconds int64     `json:"interval_seconds"`
	Since           time.Time `json:"since"`
	ReadAt          time.Time `json:"read_at"`
	MaxTasks        int       `json:"max_tasks"`
	Tasks           int       `json:"tasks"`
	Truncated       bool      `json:"truncated"`
	// ByStatus has every status, zero or not; ByType has every status of
	// each type it lists ("" for tasks without a type).
	ByStatus map[string]int            `json:"by_status"`
	ByType   map[string]map[string]int `json:"by_type"`
	// Unfinished counts queued, running, and failed tasks with a retry
	// due; WaitingRetry the last of them, Dead the failed ones without.
	// Scheduled counts the queued tasks whose start is still to come (a
	// part of by_status.queued).
	Unfinished       int            `json:"unfinished"`
	UnfinishedByType map[string]int `json:"unfinished_by_type"`
	WaitingRetry     int            `json:"waiting_retry"`
	Dead             int            `json:"dead"`
	Scheduled        int            `json:"scheduled"`
	AwaitingInput    int            `json:"awaiting_input"`
	// OldestUnfinished is null when nothing is unfinished. Its age counts
	// from its creation, so a task scheduled for later grows old here
	// while nothing is wrong.
	OldestUnfinished           *oldestTask `json:"oldest_unfinished"`
	OldestUnfinishedAgeSeconds int64       `json:"oldest_unfinished_age_seconds"`
	// OldestWaiting is the task due longest ago that no worker has taken
	// (Stats.OldestWaiting: a start or retry still to come is not due,
	// and paused types are left out), null if none; its age counts from
	// when it fell due. WaitByType is that wait for each type with a
	// task waiting, in seconds.
	OldestWaiting           *oldestTask      `json:"oldest_waiting"`
	OldestWaitingAgeSeconds int64            `json:"oldest_waiting_age_seconds"`
	WaitByType              map[string]int64 `json:"wait_by_type"`
	Failures                map[string]int   `json:"failures"`
	Broken                  int              `json:"broken"`
	Timeline                []statsBucket    `json:"timeline"` // oldest first
}

// oldestTask names the oldest unfinished task, or the one that has waited
// longest for a worker.
type oldestTask struct {
	ID        string        `json:"task_id"`
	Name      string        `json:"task_name"`
	Type      string        `json:"task_type"`
	Status    s3task.Status `json:"status"`
	CreatedAt time.Time     `json:"created_at"`
}

type statsBucket struct {
	Start     time.Time `json:"start"`
	Created   int       `json:"created"`
	Completed int       `json:"completed"`
	Failed    int       `json:"failed"`
	Abandoned int       `json:"abandoned"`
}

// stats: GET /stats?span=&max_tasks= -> 200 statsResponse.
func (a *api) stats(w http.ResponseWriter, r *http.Request, _ string) error {
	q, err := queryParams(r)
	if err != nil {
		return err
	}
	name, err := oneParam(q, "span")
	if err != nil {
		return err
	}
	name = cmpString(name, defaultSpan)
	i := slices.IndexFunc(statsSpans, func(s statsSpan) bool { return s.name == name })
	if i < 0 {
		return badRequest("invalid_query", "span %q: want one of %s", clip(name, maxEcho), statsSpanNames())
	}
	span := statsSpans[i]
	maxTasks, err := intParam(q, "max_tasks", s3task.DefaultStatsMaxTasks, 1, s3task.MaxListScan, "invalid_query")
	if err != nil {
		return err
	}
	since := span.since(time.Now())
	st, err := a.store.Stats(r.Context(), s3task.StatsOptions{Since: since, MaxTasks: maxTasks, Interval: span.interval})
	if err != nil {
		return err
	}
	resp := statsResponse{
		Span: span.name, IntervalSeconds: int64(span.interval / time.Second), Since: since.UTC(), ReadAt: time.Now().UTC(),
		MaxTasks: maxTasks, Tasks: st.Tasks, Truncated: st.Truncated,
		ByStatus: statusCounts(st.ByStatus), ByType: map[string]map[string]int{},
		Unfinished: st.Unfinished, UnfinishedByType: st.UnfinishedByType,
		WaitingRetry: st.WaitingRetry, Dead: st.ByStatus[s3task.StatusFailed] - st.WaitingRetry, Scheduled: st.Scheduled,
		AwaitingInput: st.AwaitingInput, OldestUnfinishedAgeSeconds: int64(st.OldestUnfinishedAge / time.Second),
		OldestWaitingAgeSeconds: int64(st.OldestWaitingAge / time.Second), WaitByType: map[string]int64{},
		Failures: st.Failures, Broken: st.Broken, Timeline: make([]statsBucket, 0, len(st.Timeline)),
	}
	for typ, counts := range st.ByType {
		resp.ByType[typ] = statusCounts(counts)
	}
	if t := st.OldestUnfinished; t != nil {
		resp.OldestUnfinished = oldestOf(t)
	}
	if t := st.OldestWaiting; t != nil {
		resp.OldestWaiting = oldestOf(t)
	}
	for typ, wait := range st.WaitByType {
		resp.WaitByType[typ] = int64(wait / time.Second)
	}
	for _, b := range slices.Backward(st.Timeline) {
		resp.Timeline = append(resp.Timeline, statsBucket{Start: b.Start.UTC(), Created: b.Created, Completed: b.Completed, Failed: b.Failed, Abandoned: b.Abandoned})
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// oldestOf returns the summary of t for GET /stats.
func oldestOf(t *s3task.Task) *oldestTask {
	return &oldestTask{ID: t.ID, Name: t.Name, Type: t.Type, Status: t.Status, CreatedAt: t.CreatedAt}
}

// statusCounts returns counts by status with every status present.
func statusCounts(by map[s3task.Status]int) map[string]int {
	out := make(map[string]int, len(allStatuses))
	for _, s := range allStatuses {
		out[string(s)] = by[s]
	}
	return out
}

func cmpString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// workers: GET /workers -> 200 taskview.Workers, the shape of
// "s3taskctl workers -json".
func (a *api) workers(w http.ResponseWriter, r *http.Request, _ string) error {
	if _, err := queryParams(r); err != nil {
		return err
	}
	list, err := a.store.Workers(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, taskview.WorkersOf(list, false))
	return nil
}

// periodics: GET /periodics -> 200 taskview.Periodics, the shape of
// "s3taskctl periodics -json": each periodic task this service declares
// (-summary-schedule), when it runs next, and its latest run with its task.
func (a *api) periodics(w http.ResponseWriter, r *http.Request, _ string) error {
	if _, err := queryParams(r); err != nil {
		return err
	}
	list, err := a.store.Periodics(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, taskview.PeriodicsOf(list, viewOf))
	return nil
}
