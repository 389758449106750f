package main

// Scenario 1: the requests of one task's life, phase by phase, next to the
// fewest this design can do with.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

// phases in the order of a task's life. A phase with a number belongs to
// the second attempt.
var lifePhases = []string{"create", "upload", "submit", "pickup", "handler", "finish",
	"retry", "pickup 2", "handler 2", "finish 2", "download"}

// floorItem is one request the floor needs, and why no design of this
// shape can do without it.
type floorItem struct {
	key labelKey
	n   int
	why string
}

// lifeFloor is the fewest requests a task's life takes in this design:
// status in one status.json changed only by compare-and-set, workers that
// find tasks by listing markers, files that go straight to S3.
var lifeFloor = []floorItem{
	{labelKey{"create", "PUT record If-None-Match"}, 1, "the record must exist before an upload is allowed; create-only, so it can never replace another task's"},
	{labelKey{"upload", "PUT input If-None-Match"}, 1, "the file itself, sent by the client straight to S3; create-only, so the input Submit verifies cannot be replaced"},
	{labelKey{"submit", "GET record"}, 1, "the record's status and ETag, for the compare-and-set"},
	{labelKey{"submit", "HEAD input"}, 1, "verify the input: there, within the size limit, and its ETag to pin"},
	{labelKey{"submit", "PUT marker"}, 1, "make the task findable by the workers' LIST, before it turns queued"},
	{labelKey{"submit", "PUT record If-Match"}, 1, "created → queued"},
	{labelKey{"pickup", "LIST markers"}, 1, "discovery: one LIST serves every task it finds; a worker the wake object or an event names the task to visits it without one"},
	{labelKey{"pickup", "GET record"}, 1, "the worker needs the record and its ETag to claim"},
	{labelKey{"pickup", "PUT marker"}, 1, "markers are named after the time a task is due, so that a poll reads the due ones at the head of one page: the claim moves the marker to the lease's end, before the record changes, so that polls pass over a running task and find it again if its lease runs out"},
	{labelKey{"pickup", "PUT record If-Match"}, 1, "the claim: queued → running with a lease, compare-and-set"},
	{labelKey{"pickup", "DELETE marker"}, 1, "the queued task's marker, replaced by the lease's"},
	{labelKey{"handler", "GET input If-Match"}, 1, "read the input, pinned to the ETag Submit verified"},
	{labelKey{"handler", "PUT output If-None-Match"}, 1, "write output-attempt-1, create-only"},
	{labelKey{"finish", "PUT record If-Match"}, 1, "running → completed"},
	{labelKey{"finish", "DELETE marker"}, 1, "take the finished task out of the workers' listing (the lease's marker)"},
	{labelKey{"download", "GET record"}, 1, "make sure the task is completed before signing a download URL"},
	{labelKey{"download", "GET output"}, 1, "the download itself, through the presigned URL"},
}

// lifeExtras explains the requests the library makes beyond the floor.
var lifeExtras = map[labelKey]string{
	{"submit", "GET wake"}:               "read the wake object to add this task's marker to its announcements (compare-and-set)",
	{"submit", "PUT wake If-Match"}:      "the wake object, written over the copy the Store kept of its last write (no GET while no other process writes it): tells idle workers to look, naming the marker. One PUT per submit lets every idle worker poll with a conditional GET instead of a LIST (see the idle scenario), and the one that notices visits the task named, with no LIST",
	{"submit", "PUT wake If-Match →412"}: "the Store's copy of the wake object was stale (another process wrote it since): refused, then read and written",
	{"pickup", "LIST markers"}:           "none: the idle worker visits the task the wake object names, so the floor's discovery LIST is saved",
	{"handler", "PUT record If-Match"}:   "heartbeat: renews the lease and carries progress, one per HeartbeatInterval; none for a task shorter than one",
	{"finish", "GET record"}:             "after deleting a failed task's marker the worker re-reads the record, in case an operator's Retry raced the delete",
	{"finish", "PUT record If-Match"}:    "the failed record (attempt 1)",
	{"finish", "DELETE marker"}:          "the marker of a finally failed task",
	{"retry", "GET record"}:              "Store.Retry reads the record for the compare-and-set",
	{"retry", "HEAD input"}:              "Store.Retry verifies the input again, as Submit does, and pins its current ETag",
	{"retry", "PUT marker"}:              "Store.Retry writes the new marker before the record",
	{"retry", "PUT record If-Match"}:     "failed → queued",
	{"retry", "GET wake"}:                "read the wake object to add the marker to its announcements",
	{"retry", "PUT wake If-Match"}:       "wake the idle workers",
}

// lifeSpec is one variant of a task's life.
type lifeSpec struct {
	name     string
	maxLives int           // at most this many lives (slow variants)
	work     time.Duration // the handler sleeps this long
	fail     string        // "", "transient" or "permanent": how attempt 1 ends
	worker   func(*s3task.WorkerOptions)
	note     string
}

// lifeVariant is what one variant measured, summed over its lives.
type lifeVariant struct {
	spec    lifeSpec
	lives   int
	client  counts // the application's requests
	worker  counts // the worker's requests
	pickups []time.Duration
	retries []time.Duration // failure → next claim (transient)
}

// task returns the requests per task that count: everything but the
// worker's wake checks and what it did while idle between lives.
func (v *lifeVariant) task() map[labelKey]float64 {
	out := map[labelKey]float64{}
	for i, c := range []counts{v.client, v.worker} {
		worker := i == 1
		for k, n := range c.labels {
			// The worker's wake checks are counted apart; the producer's
			// read of the wake object, to add its announcement, is Submit's.
			if worker && strings.HasPrefix(k.label, "GET wake") || k.phase == "idle" {
				continue
			}
			out[k] += float64(n) / float64(v.lives)
		}
	}
	return out
}

// excluded returns the per-task wake checks and idle-time requests left out.
func (v *lifeVariant) excluded() (wake, idle float64) {
	for k, n := range v.worker.labels {
		switch {
		case strings.HasPrefix(k.label, "GET wake"):
			wake += float64(n)
		case k.phase == "idle":
			idle += float64(n)
		}
	}
	return wake / float64(v.lives), idle / float64(v.lives)
}

func byKind(m map[labelKey]float64) map[string]float64 {
	out := map[string]float64{}
	for k, n := range m {
		out[strings.Fields(k.label)[0]] += n
	}
	return out
}

type lifeResult struct {
	cfg      *config
	variants []*lifeVariant
	where    string
}

func runLife(ctx context.Context, e *env, _ io.Writer) (result, error) {
	fast := func(o *s3task.WorkerOptions) { o.PollInterval = 50 * time.Millisecond }
	specs := []lifeSpec{
		{name: "short task (< 1 heartbeat)", worker: fast},
		// A lease of seconds, not less: a holder judges its lease by the
		// latest the server's clock may read, which one-second Date headers
		// know only to within a second.
		{name: "long task (2.5 heartbeats)", maxLives: 5, work: 2500 * time.Millisecond,
			worker: func(o *s3task.WorkerOptions) {
				fast(o)
				o.LeaseDuration, o.HeartbeatInterval, o.ClockMargin = 3*time.Second, time.Second, 500*time.Millisecond
			},
			note: "LeaseDuration 3s, HeartbeatInterval 1s, handler 2.5s"},
		{name: "attempt 1 fails, automatic retry", maxLives: 5, fail: "transient",
			worker: func(o *s3task.WorkerOptions) { fast(o); o.MaxPollInterval = 800 * time.Millisecond },
			note:   "RetryAfter 300ms; MaxPollInterval 800ms"},
		{name: "permanent failure, then Store.Retry", maxLives: 5, fail: "permanent", worker: fast},
	}
	res := &lifeResult{cfg: e.cfg, where: e.where()}
	for i, spec := range specs {
		v, err := runLives(ctx, e, fmt.Sprintf("v%d", i+1), spec)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", spec.name, err)
		}
		res.variants = append(res.variants, v)
	}
	return res, nil
}

type lifeEvent struct {
	kind     string // "claim", "fail", "complete"
	attempt  int
	terminal bool
	at       time.Time
}

func runLives(ctx context.Context, e *env, sub string, spec lifeSpec) (*lifeVariant, error) {
	lives := e.cfg.lives
	if spec.maxLives > 0 {
		lives = min(lives, spec.maxLives)
	}
	cm, wm := newMeter(), newMeter()
	cs, err := e.store(e.client(cm.wrap), sub, nil)
	if err != nil {
		return nil, err
	}
	ws, err := e.store(e.client(wm.wrap), sub, nil)
	if err != nil {
		return nil, err
	}
	hc := e.httpClient(cm.wrap)

	events := make(chan lifeEvent, 16)
	send := func(ev lifeEvent) {
		ev.at = time.Now()
		select {
		case events <- ev:
		case <-ctx.Done():
		}
	}
	handler := func(ctx context.Context, job *s3task.Job) error {
		n := job.Task.Attempt
		wm.setPhase(attemptPhase("handler", n))
		defer wm.setPhase(attemptPhase("finish", n))
		data, err := s3test.ReadAll(job.OpenInput(ctx))
		if err != nil {
			return err
		}
		switch {
		case n == 1 && spec.fail == "transient":
			return s3task.RetryAfter(errors.New("attempt 1 fails on purpose"), 300*time.Millisecond)
		case n == 1 && spec.fail == "permanent":
			return s3task.Permanent(errors.New("attempt 1 fails for good on purpose"))
		}
		if err := s3test.Sleep(ctx, spec.work); err != nil {
			return err
		}
		job.SetProgress(s3task.Progress{RowCount: 1, ProcessedCount: 1, SuccessCount: 1})
		return job.WriteOutput(ctx, bytes.NewReader(bytes.ToUpper(data)))
	}
	opts := &s3task.WorkerOptions{
		ID: "life-worker", Concurrency: 1,
		Hooks: s3task.Hooks{
			OnClaim:    func(t *s3task.Task) { send(lifeEvent{kind: "claim", attempt: t.Attempt}) },
			OnComplete: func(t *s3task.Task) { send(lifeEvent{kind: "complete", attempt: t.Attempt}) },
			OnFail: func(t *s3task.Task, _ error) {
				send(lifeEvent{kind: "fail", attempt: t.Attempt, terminal: t.Terminal()})
			},
		},
	}
	spec.worker(opts)
	w, err := s3task.NewWorker(ws, s3task.HandlerFunc(handler), opts)
	if err != nil {
		return nil, err
	}
	wm.setPhase("idle")
	rw := startWorker(ctx, w)
	defer rw.stop()
	// Let the worker do its first listing and settle into idle polling.
	if err := waitUntil(ctx, 10*time.Second, "the worker's first poll", func() bool {
		c := wm.snapshot()
		return c.kinds["LIST"] >= 1 && c.kinds["GET"] >= 2
	}); err != nil {
		return nil, err
	}

	// The application's Store writes the wake object once before the
	// lives (a Pause and a Resume of a type no task has), so that every
	// life's Submit finds it as the Store left it, as in a running
	// service: the first would otherwise create it, and read it first.
	if err := cs.Pause(ctx, "bench-warm-up"); err != nil {
		return nil, err
	}
	if err := cs.Resume(ctx, "bench-warm-up"); err != nil {
		return nil, err
	}
	if err := quiesce(ctx, wm, 300*time.Millisecond); err != nil { // the worker's listing for the Resume
		return nil, err
	}

	v := &lifeVariant{spec: spec, lives: lives}
	c0, w0 := cm.snapshot(), wm.snapshot()
	next := func(kind string) (lifeEvent, error) {
		t := time.NewTimer(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case ev := <-events:
				if ev.kind == kind {
					return ev, nil
				}
				if ev.kind == "fail" && spec.fail == "" {
					return ev, errors.New("a task failed")
				}
			case <-t.C:
				return lifeEvent{}, fmt.Errorf("timed out waiting for %s", kind)
			case <-ctx.Done():
				return lifeEvent{}, ctx.Err()
			}
		}
	}
	// settled waits for an event, then until the worker's requests that
	// still belong to it (removing a marker, say) are done.
	settled := func(kind string) (lifeEvent, error) {
		ev, err := next(kind)
		if err != nil {
			return ev, err
		}
		return ev, quiesce(ctx, wm, 100*time.Millisecond)
	}
	for i := range lives {
		cm.setPhase("create")
		t, up, err := cs.CreateForUpload(ctx, s3task.CreateParams{Name: fmt.Sprintf("life %d", i), Type: "life"}, 15*time.Minute)
		if err != nil {
			return nil, err
		}
		cm.setPhase("upload")
		if err := presignedUpload(ctx, hc, up.Put, []byte("id,name\n1,alpha\n2,beta\n")); err != nil {
			return nil, err
		}
		cm.setPhase("submit")
		wm.setPhase("pickup")
		submitted := time.Now()
		if _, err := cs.Submit(ctx, t.ID); err != nil {
			return nil, err
		}
		claim, err := next("claim")
		if err != nil {
			return nil, err
		}
		v.pickups = append(v.pickups, claim.at.Sub(submitted))
		switch spec.fail {
		case "transient":
			// The worker's requests after the failure (none at the time of
			// writing) belong to attempt 1; the retry is due 300ms later.
			failed, err := settled("fail")
			if err != nil {
				return nil, err
			}
			wm.setPhase("pickup 2")
			again, err := next("claim")
			if err != nil {
				return nil, err
			}
			v.retries = append(v.retries, again.at.Sub(failed.at))
		case "permanent":
			if _, err := settled("fail"); err != nil {
				return nil, err
			}
			cm.setPhase("retry")
			wm.setPhase("pickup 2")
			if _, err := cs.Retry(ctx, t.ID); err != nil {
				return nil, err
			}
			if _, err := next("claim"); err != nil {
				return nil, err
			}
		}
		// What the worker does after OnComplete (removing the marker)
		// still belongs to the attempt.
		if _, err := settled("complete"); err != nil {
			return nil, err
		}
		wm.setPhase("idle")
		cm.setPhase("download")
		body, err := presignedDownload(ctx, cs, hc, t.ID)
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(body, []byte("ID,NAME\n1,ALPHA\n2,BETA\n")) {
			return nil, fmt.Errorf("task %s: downloaded %q", t.ID, body)
		}
		cm.setPhase("idle")
	}
	v.client, v.worker = cm.snapshot().minus(c0), wm.snapshot().minus(w0)
	return v, nil
}

// quiesce waits until the worker behind m has made no request other than
// wake checks for quiet.
func quiesce(ctx context.Context, m *meter, quiet time.Duration) error {
	busy := func() int {
		n := 0
		for k, v := range m.snapshot().labels {
			if !strings.HasPrefix(k.label, "GET wake") {
				n += v
			}
		}
		return n
	}
	deadline := time.Now().Add(30 * time.Second)
	for last := busy(); ; {
		if err := s3test.Sleep(ctx, quiet); err != nil {
			return err
		}
		now := busy()
		if now == last {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the worker never went quiet")
		}
		last = now
	}
}

func attemptPhase(p string, attempt int) string {
	if attempt > 1 {
		return fmt.Sprintf("%s %d", p, attempt)
	}
	return p
}

// presignedUpload uploads data the way a browser or a client of the
// application would: a PUT of the URL that CreateForUpload signed.
func presignedUpload(ctx context.Context, hc *http.Client, pr *s3task.PresignedRequest, data []byte) error {
	req, err := http.NewRequestWithContext(ctx, pr.Method, pr.URL, bytes.NewReader(data))
	if err != nil {
		return err
	}
	for k, vs := range pr.Header {
		if !strings.EqualFold(k, "Host") {
			req.Header[k] = vs
		}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("presigned upload: %s", resp.Status)
	}
	return nil
}

// presignedDownload downloads a completed task's output through
// PresignDownload and a GET of the URL.
func presignedDownload(ctx context.Context, s *s3task.Store, hc *http.Client, id string) ([]byte, error) {
	pr, err := s.PresignDownload(ctx, id, 5*time.Minute)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, pr.Method, pr.URL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("presigned download: %s", resp.Status)
	}
	return body, nil
}

// floorTotal returns the floor by kind.
func floorTotal() map[string]float64 {
	out := map[string]float64{}
	for _, f := range lifeFloor {
		out[strings.Fields(f.key.label)[0]] += float64(f.n)
	}
	return out
}

// sortedKeys orders per-task requests by phase, then by label.
func sortedKeys(m map[labelKey]float64) []labelKey {
	keys := make([]labelKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	order := func(p string) int {
		if i := slices.Index(lifePhases, p); i >= 0 {
			return i
		}
		return len(lifePhases)
	}
	// Within a phase: the floor's requests in the floor's order, then the
	// others by label.
	rank := func(k labelKey) int {
		for i, f := range lifeFloor {
			if f.key.label == k.label && strings.TrimRight(f.key.phase, " 0123456789") == strings.TrimRight(k.phase, " 0123456789") {
				return i
			}
		}
		return len(lifeFloor)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if order(a.phase) != order(b.phase) {
			return order(a.phase) < order(b.phase)
		}
		if rank(a) != rank(b) {
			return rank(a) < rank(b)
		}
		return a.label < b.label
	})
	return keys
}

// extraOverFloor returns the requests per task beyond the floor, by label.
func (v *lifeVariant) extraOverFloor() map[labelKey]float64 {
	extra := v.task()
	for _, f := range lifeFloor {
		extra[f.key] -= float64(f.n)
	}
	for k, n := range extra {
		if n == 0 {
			delete(extra, k)
		}
	}
	return extra
}

func (r *lifeResult) tables() []*table {
	base := r.variants[0]
	per := base.task()
	t := newTable("Scenario 1: one task's life, request by request, next to the floor",
		"step", "request", "measured per task", "floor", "why")
	floor := map[labelKey]floorItem{}
	for _, f := range lifeFloor {
		floor[f.key] = f
		if _, ok := per[f.key]; !ok {
			per[f.key] = 0
		}
	}
	for _, k := range sortedKeys(per) {
		f, inFloor := floor[k]
		why := f.why
		if !inFloor || per[k] > float64(f.n) {
			why = "**extra**: " + lifeExtras[k]
			if lifeExtras[k] == "" {
				why = "**extra**: unexplained"
			}
		}
		t.add(k.phase, k.label, per[k], f.n, why)
	}
	measured, fl := byKind(base.task()), floorTotal()
	t.add("**total**", "", kindSummary(measured), kindSummary(fl), fmt.Sprintf("%s above the floor", num(sumValues(measured)-sumValues(fl))))
	wake, idle := base.excluded()
	t.note("Averaged over %d lives against %s; every life gave the same counts if the averages are whole numbers.", base.lives, r.where)
	t.note("The upload is CreateForUpload's presigned PUT URL, and the download PresignDownload plus a GET of the URL; Store.UploadInput costs the same GET and PUT.")
	t.note("Not counted per task: the worker's wake checks (%s per task here, at PollInterval 50ms; one conditional GET per PollInterval whether or not there is work, see the idle scenario) and %s other requests while idle. The client's polling of Store.Get while it waits (1 GET per poll) is the application's choice and not counted either.", num(wake), num(idle))
	t.note("Floor: %s requests. Discovery (the LIST) is 1 for a task alone and shrinks when one listing finds several tasks.", num(sumValues(fl)))
	t.note("Cost per 1,000 such tasks at the given prices: %s measured, %s at the floor.", dollars(r.cfg.prices.cost(scale(measured, 1000))), dollars(r.cfg.prices.cost(scale(fl, 1000))))

	vt := newTable("Scenario 1b: variants of a task's life",
		"variant", "LIST", "GET", "HEAD", "PUT", "POST", "DELETE", "total", "vs short task", "requests beyond the short task's", "$ per 1,000 tasks", "pickup p50")
	baseTotal := sumValues(byKind(base.task()))
	for _, v := range r.variants {
		m := byKind(v.task())
		cells := []any{v.spec.name}
		cells = append(cells, kindCells(m)...)
		diff := v.task()
		for k, n := range base.task() {
			diff[k] -= n
		}
		var parts []string
		for _, k := range sortedKeys(diff) {
			if n := diff[k]; n != 0 {
				parts = append(parts, fmt.Sprintf("%s: %s ×%s", k.phase, k.label, num(n)))
			}
		}
		extra := strings.Join(parts, "; ")
		if extra == "" {
			extra = "none"
		}
		cells = append(cells, sumValues(m), signed(sumValues(m)-baseTotal), extra,
			dollars(r.cfg.prices.cost(scale(m, 1000))), percentile(v.pickups, 50))
		vt.add(cells...)
	}
	for _, v := range r.variants {
		if v.spec.note != "" {
			vt.note("%s: %s.", v.spec.name, v.spec.note)
		}
		if len(v.retries) > 0 {
			vt.note("%s: the retry was claimed %s (median) after the failure, for a RetryAfter of 300ms: the worker that failed it lists again when the retry falls due by the server's clock, whose Date headers have one-second resolution.", v.spec.name, dur(percentile(v.retries, 50)))
		}
	}
	vt.note("Pickup is Submit's start to OnClaim at PollInterval 50ms.")
	return []*table{t, vt}
}

func signed(v float64) string {
	if v > 0 {
		return "+" + num(v)
	}
	return num(v)
}

func scale(m map[string]float64, f float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		out[k] = v * f
	}
	return out
}
