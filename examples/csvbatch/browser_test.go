package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/taskview"
)

// chromiumPath is where Debian's chromium package installs the browser.
const chromiumPath = "/usr/bin/chromium"

// TestBrowser drives the operator page's task list (#/tasks) in headless
// Chromium: sign in with the token, create a task and upload its CSV
// through the page (the presigned POST form goes straight to S3), watch it
// complete, and find the download link. A running task whose worker went
// silent shows the overdue report flag; a task created without its file
// gets it through the row's "Upload file" button, which asks for a fresh
// upload link. It saves a screenshot under t.TempDir() and, if
// CSVBATCH_SCREENSHOT names a file, a copy there.
//
// It is skipped when Chromium is missing, except under CI=true, where it
// fails instead.
func TestBrowser(t *testing.T) {
	t.Parallel()
	skipWithoutChromium(t)

	s := startService(t, svcOptions{})
	pending := s.create("waiting for its file", typeStats, nil) // shows Upload file and Cancel, no Retry
	stuck := s.create("worker went silent", typeStats, nil)
	// Make it a task whose worker claimed it, heartbeats every minute and
	// has been silent for 3: two heartbeats are late. Its lease runs for
	// an hour, longer than the test, so no worker takes it over meanwhile.
	silentSince := time.Now().UTC().Add(-3 * time.Minute).Truncate(time.Millisecond)
	rec := *stuck.Task.Task
	rec.Status, rec.Attempt, rec.WorkerID = s3task.StatusRunning, 1, "worker-gone"
	rec.UpdatedAt, rec.LeaseExpiresAt = silentSince, silentSince.Add(time.Hour)
	rec.History = []s3task.Attempt{{Number: 1, WorkerID: "worker-gone", StartedAt: silentSince, Outcome: s3task.OutcomeRunning, HeartbeatInterval: time.Minute}}
	body, err := json.Marshal(&rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.objects().Put(t.Context(), s.app.store.Prefix()+rec.ID+"/status.json", body); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	input := filepath.Join(dir, "people.csv")
	if err := os.WriteFile(input, []byte(peopleCSV), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := startBrowser(t)

	completedLink := `#rows tr[data-status="completed"] a.download`
	// The API answers 401 without a token, so the page asks for one, in
	// words for people; a wrong token gets words of its own.
	loginMessage := func() (string, error) {
		return chromedp.Run(ctx, poll[string](`(() => {
			const m = document.querySelector('#login-error');
			return !document.querySelector('#login').hidden && m.textContent !== '' && m.textContent;
		})()`))
	}
	first, err := func() (string, error) {
		if err := chromedp.Do(ctx, chromedp.Navigate(s.base+"/#/tasks"), chromedp.WaitVisible(chromedp.CSS("#token"))); err != nil {
			return "", err
		}
		return loginMessage()
	}()
	if err != nil || first != "Enter the access token to sign in." {
		t.Errorf("sign-in message without a token: %q, %v", first, err)
	}
	err = chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token-0123456789"),
		chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)),
		poll[chromedp.Void](`document.querySelector('#login-error').textContent.includes('not accepted')`),
	)
	if wrong, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#login-error"))); err != nil || wrong != "That token was not accepted. Check it and try again." {
		t.Errorf("sign-in message for a wrong token: %q, %v", wrong, err)
	}
	err = chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#token").value = ""`),
		chromedp.SendKeys(chromedp.CSS("#token"), testToken),
		chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#rows tr[data-id=%q]`, pending.Task.ID))),
		chromedp.SendKeys(chromedp.CSS("#name"), "Uploaded from the page"),
		chromedp.SendKeys(chromedp.CSS("#required"), "name,email"),
		chromedp.SetUploadFiles(chromedp.CSS("#file"), []string{input}),
		chromedp.Click(chromedp.CSS("#create-button")),
		chromedp.WaitVisible(chromedp.CSS(completedLink)),
	)
	if err != nil {
		status, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#create-status")))
		t.Fatalf("driving the page: %v (create status %q)", err, status)
	}

	// What the page shows for each task.
	type row struct {
		Status, Progress, Buttons, Overdue string
		Download                           bool
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]row](`[...document.querySelectorAll('#rows tr.task')].map(tr => ({
		Status: tr.dataset.status,
		Progress: tr.querySelector('.progress-cell').textContent,
		Buttons: [...tr.querySelectorAll('button')].map(b => b.textContent).join(','),
		Overdue: tr.querySelector('.overdue') ? tr.querySelector('.overdue').textContent : '',
		Download: tr.querySelector('a.download') !== null,
	}))`))
	if err != nil {
		t.Fatal(err)
	}
	// The silence the page shows is as old as its latest reload, between
	// the seeding and now: 3 minutes, or more on a slow machine.
	silent := "?"
	for m := 3; m <= int(time.Since(silentSince)/time.Minute); m++ {
		if len(rows) > 1 && strings.HasPrefix(rows[1].Overdue, fmt.Sprintf("no report for %d m;", m)) {
			silent = strconv.Itoa(m)
		}
	}
	recovers, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(
		`new Date(%q).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })`,
		rec.LeaseExpiresAt.Add(s3task.DefaultClockMargin).Format(time.RFC3339Nano))))
	if err != nil {
		t.Fatal(err)
	}
	want := []row{
		{Status: "completed", Progress: "4 / 4 rows, 2 ok, 2 bad", Download: true},
		{Status: "running", Progress: "0 / ? rows, 0 ok, 0 bad", Buttons: "Cancel",
			Overdue: "no report for " + silent + " m; recovered at " + recovers + " if it stays silent"},
		{Status: "created", Buttons: "Upload file,Cancel"},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("task rows on the page (-want +got):\n%s", diff)
	}

	// The created task gets its file late: its button asks the API for a
	// fresh upload link, the page uploads the file and submits the task.
	pendingRow := fmt.Sprintf(`#rows tr[data-id=%q]`, pending.Task.ID)
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(pendingRow+` button[data-action="upload"]`)),
		chromedp.SetUploadFiles(chromedp.CSS("#reupload-file"), []string{input}, chromedp.NodeReady),
		chromedp.WaitVisible(chromedp.CSS(pendingRow+`[data-status="completed"] a.download`)),
	)
	if err != nil {
		status, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#row-status")))
		t.Fatalf("uploading the created task's file from its row: %v (row status %q)", err, status)
	}

	// The download link's flow, as its click handler runs it: ask the API
	// for a presigned URL, then fetch the file from S3.
	output, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(async () => {
		const id = document.querySelector('`+completedLink+`').dataset.id;
		const out = await api('GET', '/tasks/' + encodeURIComponent(id) + '/output');
		const resp = await fetch(out.url);
		return resp.text();
	})()`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(output, "name,email,city,row_status\nAda Lovelace,ada@example.com,London,ok\n") {
		t.Errorf("downloaded output:\n%s", output)
	}

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(t.TempDir(), "csvbatch-page.png")
	if err := os.WriteFile(shot, png, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the page: %s", shot)
	if extra := os.Getenv("CSVBATCH_SCREENSHOT"); extra != "" {
		if err := os.WriteFile(extra, png, 0o644); err != nil {
			t.Error(err)
		}
		t.Logf("screenshot copied to %s", extra)
	}

	// The task the page created carries the signed-in caller.
	var page listResponse
	s.call("GET", "/tasks?limit=1", nil, http.StatusOK, &page)
	if len(page.Tasks) != 1 || page.Tasks[0].CreatedBy != "alice" || page.Tasks[0].Name != "Uploaded from the page" {
		t.Errorf("newest task: %+v", page.Tasks)
	}
}

// skipWithoutChromium skips t when Chromium is missing, except under
// CI=true, where it fails instead.
func skipWithoutChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %s is missing (apt-get install -y chromium): %v", chromiumPath, err)
		}
		t.Skipf("%s not found; install chromium to run the browser test", chromiumPath)
	}
}

// startBrowser starts headless Chromium with a 1280x860 window for t and
// returns a context for chromedp; a browser that does not start ends the
// test. See launchBrowser.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	ctx, err := launchBrowser(t, chromiumPath)
	if err != nil {
		t.Fatalf("starting %s: %v", chromiumPath, err)
	}
	return ctx
}

// launchBrowser starts the browser at execPath for t and returns a context
// for chromedp, or nil and the error if it did not start. The browser exits
// when the test ends, before the services it started earlier stop.
//
// The browser starts here, and a caller gets no context of a browser that
// did not: chromedp starts a browser at the first Run on a context, and
// another Run on a context whose start failed starts a second browser,
// whose exit closes the allocator's channel a second time and panics the
// whole test binary (close of closed channel, in ExecAllocator.Allocate).
//
// The context has no clock of its own: whatever a test waits for in the
// page it waits for as long as the test may run (go test's -timeout), so a
// slow machine makes it slower, never a failure. It ends a little before
// that deadline, so that a page that never gets there fails the test with
// what it was waiting for instead of a panic of the test binary.
func launchBrowser(t *testing.T, execPath string) (context.Context, error) {
	t.Helper()
	var logMu sync.Mutex
	logging := true
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		if logging {
			t.Logf("chromium: "+format, args...)
		}
	}
	t.Cleanup(func() { // last: the browser may log while it exits
		logMu.Lock()
		logging = false
		logMu.Unlock()
	})
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(execPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "profile")),
		chromedp.WindowSize(1280, 860),
	)
	t.Cleanup(cancelAlloc) // waits for the browser to exit
	browserCtx, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithErrorf(logf))
	t.Cleanup(cancelBrowser)
	// The first Run binds the browser's life to its context: this one,
	// which only the test's end cancels.
	if err := chromedp.Do(browserCtx); err != nil {
		return nil, err
	}
	ctx := browserCtx
	if deadline, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(browserCtx, deadline.Add(-browserDeadlineMargin))
		t.Cleanup(cancel)
	}
	return ctx, nil
}

// TestLaunchBrowserFails: a browser that does not start is an error, and
// no context of it, so no later Run can start a second browser on it;
// the test binary does not panic, and nothing is left running (TestMain
// checks for goroutines).
func TestLaunchBrowserFails(t *testing.T) {
	t.Parallel()
	notABrowser, err := exec.LookPath("false")
	if err != nil {
		t.Skip(err)
	}
	ctx, err := launchBrowser(t, notABrowser)
	if err == nil || ctx != nil {
		t.Fatalf("launchBrowser(%s) = %v, %v; want no context and an error", notABrowser, ctx, err)
	}
	if !strings.Contains(err.Error(), "failed to start") {
		t.Errorf("error %q does not say the browser failed to start", err)
	}
}

// browserDeadlineMargin is how long before go test's deadline a browser
// test's context ends, so that the test fails with its own message.
const browserDeadlineMargin = 30 * time.Second

// poll waits until the page's expression is truthy and returns its value,
// as chromedp.Poll does but without Poll's 30-second limit: it waits as
// long as the context lasts (see startBrowser).
func poll[T any](expression string) chromedp.Action[T] {
	return chromedp.Poll[T](expression, chromedp.WithPollingTimeout(0))
}

// TestBrowserOperatorViews drives the operator's views in headless
// Chromium, at a desktop's width and at a phone's (390 px): the overview
// (counts by state, the oldest unfinished task, failures by category and
// the charts, drawn from GET /stats), the state views with their actions
// (Run now on a scheduled task, Retry on a dead one, none on a bad_input
// failure), the type filter, jump to an ID, the detail of a task, and the
// workers, and the bulk actions: two dead tasks ticked and retried, and
// every dead task of a type, each through its dry run's confirmation. At
// 390 px every view must fit the screen, with a task's status and actions
// in view, and so must the bulk bar and the confirmation. With
// CSVBATCH_SCREENSHOTS naming a folder it saves the overview and the dead
// tasks at both widths there, with the detail, the workers and a bulk
// confirmation at a desktop's width.
func TestBrowserOperatorViews(t *testing.T) {
	t.Parallel()
	skipWithoutChromium(t)
	// The periodic summary runs daily twelve hours from now: it is shown,
	// and makes no run during the test.
	summaryAt := fmt.Sprintf("%02d:00", (time.Now().UTC().Hour()+12)%24)
	s := startService(t, svcOptions{args: []string{"-summary-schedule", "daily:" + summaryAt}})
	v := seedOperatorViews(t, s)
	ctx := startBrowser(t)
	shots := os.Getenv("CSVBATCH_SCREENSHOTS")
	// capture saves what take shoots (the whole page, or the screen).
	capture := func(name string, take chromedp.Action[[]byte]) {
		t.Helper()
		png, err := chromedp.Run(ctx, take)
		if err != nil {
			t.Fatal(err)
		}
		dir := shots
		if dir == "" {
			dir = t.TempDir()
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	}
	screenshot := func(name string) {
		t.Helper()
		capture(name, chromedp.FullScreenshot(100))
	}
	// run runs the page's actions, failing the test with what.
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// show opens the view of fragment, waits until it has loaded since,
	// then until js holds.
	show := func(fragment, view, js string) {
		t.Helper()
		run("opening "+fragment,
			chromedp.Evaluate[chromedp.Void](fmt.Sprintf("window.loadsBefore = Number(document.body.dataset.loads); location.hash = %q", fragment)),
			poll[chromedp.Void](fmt.Sprintf("Number(document.body.dataset.loads) > window.loadsBefore && document.body.dataset.loaded === %q", view)),
			poll[chromedp.Void](js))
	}
	evaluate := func(js string, out any) {
		t.Helper()
		raw, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
	}

	run("signing in",
		chromedp.Navigate(s.base+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), testToken),
		chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)),
		poll[chromedp.Void](`document.querySelectorAll('#chart-completed rect.bar').length > 0`))

	// The overview.
	// checkOverview checks the overview against GET /stats. With
	// nothingWaits, no task may wait for a worker.
	checkOverview := func(wantDead, wantScheduled string, nothingWaits bool, wantFailures map[string]string) {
		t.Helper()
		var got struct {
			Counts   map[string]string
			Failures map[string]string
			Oldest   string
			Waiting  string
			Bars     []int
			Caption  string
			Types    []string
		}
		evaluate(`({
			Counts: Object.fromEntries([...document.querySelectorAll('#state-counts a')].map(a => [a.dataset.state, a.querySelector('.count').textContent])),
			Failures: Object.fromEntries([...document.querySelectorAll('#failure-rows tr')].map(tr => [tr.dataset.category, tr.querySelector('td.num').textContent])),
			Oldest: document.querySelector('#oldest a').getAttribute('href'),
			Waiting: document.querySelector('#oldest-waiting a')?.getAttribute('href') ?? document.querySelector('#oldest-waiting').textContent,
			Bars: [...document.querySelectorAll('#chart-completed rect.bar')].map(r => Number(r.dataset.value)),
			Caption: document.querySelector('#chart-completed figcaption').textContent,
			Types: [...document.querySelectorAll('#type-rows tr')].map(tr => tr.dataset.type),
		})`, &got)
		var st statsResponse
		s.call("GET", "/stats?span=24h", nil, http.StatusOK, &st)
		wantCounts := map[string]string{}
		for k, n := range map[string]int{"created": st.ByStatus["created"], "queued": st.ByStatus["queued"], "scheduled": st.Scheduled, "running": st.ByStatus["running"],
			"retrying": st.WaitingRetry, "dead": st.Dead, "completed": st.ByStatus["completed"], "abandoned": st.ByStatus["abandoned"]} {
			wantCounts[k] = strconv.Itoa(n)
		}
		if diff := cmp.Diff(wantCounts, got.Counts); diff != "" {
			t.Errorf("overview counts (-want +got):\n%s", diff)
		}
		if got.Counts["dead"] != wantDead || got.Counts["retrying"] != "1" || got.Counts["running"] != "1" {
			t.Errorf("overview counts %v: want %s dead, 1 retrying, 1 running", got.Counts, wantDead)
		}
		if diff := cmp.Diff(wantFailures, got.Failures); diff != "" {
			t.Errorf("failures by category (-want +got):\n%s", diff)
		}
		if got.Oldest != "#/tasks/"+st.OldestUnfinished.ID {
			t.Errorf("oldest unfinished task links to %q, want %s", got.Oldest, st.OldestUnfinished.ID)
		}
		if got.Counts["scheduled"] != wantScheduled {
			t.Errorf("%s scheduled, want %s", got.Counts["scheduled"], wantScheduled)
		}
		switch {
		case st.OldestWaiting == nil && got.Waiting != "Nothing is waiting for a worker.":
			t.Errorf("oldest waiting task shown as %q, want none", got.Waiting)
		case st.OldestWaiting != nil && got.Waiting != "#/tasks/"+st.OldestWaiting.ID:
			t.Errorf("oldest waiting task links to %q, want %s", got.Waiting, st.OldestWaiting.ID)
		case nothingWaits && st.OldestWaiting != nil:
			t.Errorf("oldest waiting task %+v, want none", st.OldestWaiting)
		}
		var want []int
		for _, b := range st.Timeline {
			want = append(want, b.Completed)
		}
		if diff := cmp.Diff(want, got.Bars); diff != "" || len(got.Bars) != 24 {
			t.Errorf("completed bars, one per hour (-want +got):\n%s", diff)
		}
		// The tasks completed hours ago show in the bars of their hours,
		// found by the buckets' starts: the hour may have turned since
		// they were written.
		for _, at := range v.historyAt {
			i := slices.IndexFunc(st.Timeline, func(b statsBucket) bool {
				return !at.Before(b.Start) && at.Before(b.Start.Add(time.Hour))
			})
			if i < 0 || i >= len(got.Bars) || got.Bars[i] == 0 {
				t.Errorf("completed bars %v: nothing in the bar of %s (bar %d)", got.Bars, at.UTC().Format(time.RFC3339), i)
			}
		}
		if !strings.HasPrefix(got.Caption, "Completed "+strconv.Itoa(st.ByStatus["completed"])+" in the span") {
			t.Errorf("chart caption %q", got.Caption)
		}
		if diff := cmp.Diff([]string{typeEnrich, typeStats, typeSummary}, got.Types); diff != "" {
			t.Errorf("types (-want +got):\n%s", diff)
		}
	}
	// The scheduled task and the one whose retry is an hour ahead are
	// unfinished, but no task waits for a worker: the worker has taken
	// everything that fell due.
	checkOverview("8", "1", true, map[string]string{catBadInput: "2", catIO: "7"})

	// Pausing a type from its row: confirmed, it reads paused with a
	// Resume button, and the library has it paused; then resumed.
	pauseState := func() (badge, button string) {
		t.Helper()
		var got []string
		evaluate(fmt.Sprintf(`(() => { const tr = document.querySelector('#type-rows tr[data-type=%q]'); return [tr.querySelector('.pause-cell span').textContent, tr.querySelector('.pause-cell button').textContent]; })()`, typeStats), &got)
		return got[0], got[1]
	}
	if b, btn := pauseState(); b != "claiming" || btn != "Pause" {
		t.Errorf("%s before a pause: %q, %q", typeStats, b, btn)
	}
	run("pausing a type",
		chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`#type-rows tr[data-type=%q] button[data-action="pause-type"]`, typeStats))),
		poll[chromedp.Void](fmt.Sprintf(`!!document.querySelector('#type-rows tr[data-type=%q] button[data-action="resume-type"]')`, typeStats)))
	if b, btn := pauseState(); b != "paused" || btn != "Resume" {
		t.Errorf("%s after the pause: %q, %q", typeStats, b, btn)
	}
	if lib, err := s.app.store.Paused(t.Context()); err != nil || !slices.Equal(lib, []string{typeStats}) {
		t.Errorf("Store.Paused after the page's pause = %v, %v", lib, err)
	}
	screenshot("operator-overview.png")
	run("resuming the type",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`#type-rows tr[data-type=%q] button[data-action="resume-type"]`, typeStats))),
		poll[chromedp.Void](fmt.Sprintf(`!!document.querySelector('#type-rows tr[data-type=%q] button[data-action="pause-type"]')`, typeStats)))
	if lib, err := s.app.store.Paused(t.Context()); err != nil || len(lib) != 0 {
		t.Errorf("Store.Paused after the page's resume = %v, %v", lib, err)
	}

	// The dead tasks, from the overview's card: a Retry where it can
	// help, the reason where it cannot.
	run("opening the dead tasks", chromedp.Click(chromedp.CSS(`#state-counts a[data-state="dead"]`)))
	deadRows := `document.querySelectorAll('#rows tr.task').length === 8`
	run("listing the dead tasks", poll[chromedp.Void](deadRows))
	type row struct {
		ID, Status, Buttons, Final, Category, Note string
	}
	rows := func() map[string]row {
		t.Helper()
		var got []row
		evaluate(`[...document.querySelectorAll('#rows tr.task')].map(tr => ({
			ID: tr.dataset.id, Status: tr.dataset.status,
			Buttons: [...tr.querySelectorAll('button')].map(b => b.textContent).join(','),
			Final: tr.querySelector('.final, .retry-at') ? tr.querySelector('.final, .retry-at').textContent : '',
			Category: tr.querySelector('.category') ? tr.querySelector('.category').textContent : '',
			Note: tr.querySelector('.retry-note') ? tr.querySelector('.retry-note').textContent : '',
		}))`, &got)
		m := map[string]row{}
		for _, r := range got {
			m[r.ID] = r
		}
		return m
	}
	dead := rows()
	for id, want := range map[string]row{
		v.badInput: {Buttons: "Cancel", Final: "final", Category: catBadInput},
		v.ioDead:   {Buttons: "Retry,Cancel", Final: "final", Category: catIO},
	} {
		got := dead[id]
		want.ID, want.Status, want.Note = id, "failed", got.Note
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("dead task %s (-want +got):\n%s", id, diff)
		}
	}
	if note := dead[v.badInput].Note; !strings.Contains(note, "no retry offered") {
		t.Errorf("bad_input task's note %q, want it to say why no retry is offered", note)
	}
	screenshot("operator-failed.png")

	// The type filter keeps the dead csv_enrich tasks.
	run("filtering by type",
		chromedp.Evaluate[chromedp.Void](`(() => { const s = document.querySelector('#type-filter'); s.value = 'csv_enrich'; s.dispatchEvent(new Event('change')); })()`),
		poll[chromedp.Void](`location.hash === '#/tasks?status=dead&type=csv_enrich' && document.querySelectorAll('#rows tr.task').length === 4`))
	enrich := rows()
	for _, id := range append([]string{v.badInput}, v.deadEnrich[:]...) {
		if _, ok := enrich[id]; !ok {
			t.Errorf("dead csv_enrich tasks: %v, want %s among them", enrich, id)
		}
	}

	// The detail of the bad_input task, from its row.
	run("opening a task from its row",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`#rows tr[data-id=%q] .name-cell a`, v.badInput))),
		poll[chromedp.Void](fmt.Sprintf(`document.querySelector('#detail').dataset.id === %q`, v.badInput)))
	fields := func() map[string]string {
		t.Helper()
		var got map[string]string
		evaluate(`Object.fromEntries([...document.querySelectorAll('#detail dt')].map(dt => [dt.textContent, dt.nextElementSibling.textContent]))`, &got)
		return got
	}
	detailButtons := func() string {
		t.Helper()
		var got string
		evaluate(`[...document.querySelectorAll('#detail .detail-actions button')].map(b => b.textContent).join(',')`, &got)
		return got
	}
	f := fields()
	for k, want := range map[string]string{
		"ID": v.badInput, "Type": typeEnrich, "Category": catBadInput, "Final": "yes: no retry is due",
		"Attempts used": "1 of 3", "Input size": strconv.Itoa(len(picture)) + " B", "Worker": s.app.worker.ID(),
	} {
		if f[k] != want {
			t.Errorf("detail %s = %q, want %q", k, f[k], want)
		}
	}
	if !strings.Contains(f["Last error"], "binary file, not CSV") || !strings.Contains(f["Retry"], "no retry offered") ||
		!strings.Contains(f["Status"], "failedattempt 1 of 3final") {
		t.Errorf("detail of the bad_input task: %v", f)
	}
	if b := detailButtons(); b != "Cancel" {
		t.Errorf("detail actions %q, want Cancel alone", b)
	}
	// Its attempts, from the record's attempt_history: the one that failed.
	var attempts []map[string]string
	evaluate(`[...document.querySelectorAll('#detail .history-list li')].map(li => ({attempt: li.dataset.attempt, outcome: li.dataset.outcome, text: li.textContent}))`, &attempts)
	if len(attempts) != 1 || attempts[0]["attempt"] != "1" || attempts[0]["outcome"] != "failed" ||
		!strings.Contains(attempts[0]["text"], s.app.worker.ID()) || !strings.Contains(attempts[0]["text"], catBadInput) ||
		!strings.Contains(attempts[0]["text"], "binary file, not CSV") {
		t.Errorf("attempts in the detail of the bad_input task: %v; want attempt 1, failed by %s, %s, with its error", attempts, s.app.worker.ID(), catBadInput)
	}
	screenshot("operator-task.png")

	// Retry on the dead io task: it leaves the dead tasks and completes.
	show("#/tasks?status=dead", "tasks", deadRows)
	run("retrying a dead task",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`#rows tr[data-id=%q] button[data-action="retry"]`, v.ioDead))),
		poll[chromedp.Void](fmt.Sprintf(`!document.querySelector('#rows tr[data-id=%q]')`, v.ioDead)))
	s.waitFor(v.ioDead, "completed after the page's retry", completed)

	// Bulk: tick two dead tasks and retry them. The dialog shows the dry
	// run's count, which changed nothing; Confirm retries them, and they
	// leave the dead tasks and complete.
	dialogState := func() (got struct {
		Open                     bool
		Phase, Title, Summary    string
		Confirm                  string
		ConfirmShown, ConfirmsOK bool
		Items                    map[string]string // task ID: outcome
		Texts                    map[string]string // task ID: what it says
	}) {
		t.Helper()
		evaluate(`(() => {
			const d = document.querySelector('#bulk-dialog'), c = document.querySelector('#bulk-confirm');
			const items = [...document.querySelectorAll('#bulk-results li')];
			return { Open: d.open, Phase: d.dataset.phase, Title: document.querySelector('#bulk-title').textContent,
				Summary: document.querySelector('#bulk-summary').textContent, Confirm: c.textContent,
				ConfirmShown: !c.hidden, ConfirmsOK: !c.disabled,
				Items: Object.fromEntries(items.map(li => [li.dataset.id, li.dataset.outcome])),
				Texts: Object.fromEntries(items.map(li => [li.dataset.id, li.textContent])) };
		})()`, &got)
		return got
	}
	phase := func(p string) chromedp.Action[chromedp.Void] {
		return poll[chromedp.Void](fmt.Sprintf(`document.querySelector('#bulk-dialog').open && document.querySelector('#bulk-dialog').dataset.phase === %q`, p))
	}
	show("#/tasks?status=dead", "tasks", `document.querySelectorAll('#rows tr.task').length === 7`)
	var retryAllHidden bool
	evaluate(`document.querySelector('#bulk-retry-all').hidden`, &retryAllHidden)
	if !retryAllHidden {
		t.Error(`"Retry all" shown in the dead tasks of every type`)
	}
	pair := v.deadEnrich[:2]
	run("ticking two dead tasks",
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`for (const id of [%q, %q]) document.querySelector('#rows tr[data-id="' + id + '"] .row-select').click()`, pair[0], pair[1])),
		poll[chromedp.Void](`document.querySelector('#bulk-count').textContent === '2 selected' && !document.querySelector('#bulk-retry').disabled && document.querySelector('#select-page').indeterminate`))
	run("Retry selected", chromedp.Click(chromedp.CSS("#bulk-retry")), phase("confirm"))
	got := dialogState()
	if got.Title != "Retry 2 selected tasks?" || got.Summary != "2 tasks would be retried." || got.Confirm != "Retry 2 tasks" || !got.ConfirmsOK ||
		!cmp.Equal(got.Items, map[string]string{pair[0]: "would_do", pair[1]: "would_do"}) {
		t.Errorf("the confirmation of Retry selected: %+v", got)
	}
	for _, id := range pair {
		if task := s.get(id); task.Status != s3task.StatusFailed {
			t.Errorf("task %s is %s after the dry run, want it still failed", id, task.Status)
		}
	}
	capture("operator-bulk.png", chromedp.CaptureScreenshot())
	run("confirming the retry", chromedp.Click(chromedp.CSS("#bulk-confirm")), phase("done"))
	got = dialogState()
	if got.Summary != "2 tasks retried." || got.ConfirmShown || !cmp.Equal(got.Items, map[string]string{pair[0]: "done", pair[1]: "done"}) {
		t.Errorf("the outcome of Retry selected: %+v", got)
	}
	run("closing the outcome", chromedp.Click(chromedp.CSS("#bulk-close")),
		poll[chromedp.Void](fmt.Sprintf(`!document.querySelector('#bulk-dialog').open && !document.querySelector('#rows tr[data-id=%q]') && !document.querySelector('#rows tr[data-id=%q]') && document.querySelector('#bulk-count').textContent === 'none selected'`, pair[0], pair[1])))
	for _, id := range pair {
		s.waitFor(id, "completed after the bulk retry", completed)
	}

	// Every dead task of a type: the bad_input one is skipped, since no
	// retry is offered for it; the other is retried and completes.
	show("#/tasks?status=dead&type=csv_enrich", "tasks", `document.querySelectorAll('#rows tr.task').length === 2`)
	run("Retry all dead csv_enrich tasks",
		poll[chromedp.Void](`!document.querySelector('#bulk-retry-all').hidden && document.querySelector('#bulk-retry-all').textContent === 'Retry all dead csv_enrich tasks'`),
		chromedp.Click(chromedp.CSS("#bulk-retry-all")), phase("confirm"))
	last := v.deadEnrich[2]
	got = dialogState()
	if got.Title != "Retry all dead csv_enrich tasks?" || got.Summary != "1 task would be retried, 1 skipped." || got.Confirm != "Retry 1 task" ||
		!cmp.Equal(got.Items, map[string]string{last: "would_do", v.badInput: "skipped"}) || !strings.Contains(got.Texts[v.badInput], "no retry offered") {
		t.Errorf("the confirmation of Retry all: %+v", got)
	}
	run("confirming the retry of them all", chromedp.Click(chromedp.CSS("#bulk-confirm")), phase("done"))
	if got = dialogState(); got.Summary != "1 task retried, 1 skipped." || !cmp.Equal(got.Items, map[string]string{last: "done", v.badInput: "skipped"}) {
		t.Errorf("the outcome of Retry all: %+v", got)
	}
	run("closing the outcome", chromedp.Click(chromedp.CSS("#bulk-close")),
		poll[chromedp.Void](fmt.Sprintf(`!document.querySelector('#bulk-dialog').open && !document.querySelector('#rows tr[data-id=%q]') && !!document.querySelector('#rows tr[data-id=%q]')`, last, v.badInput)))
	s.waitFor(last, "completed after Retry all", completed)
	show("#/tasks?status=dead", "tasks", `document.querySelectorAll('#rows tr.task').length === 4`)

	// Run now on the scheduled task: it leaves the scheduled tasks and
	// completes.
	run("opening the scheduled tasks",
		chromedp.Click(chromedp.CSS(`#state-tabs a[data-state="scheduled"]`)),
		poll[chromedp.Void](fmt.Sprintf(`!!document.querySelector('#rows tr[data-id=%q] button[data-action="run-now"]')`, v.scheduled)))
	if r := rows()[v.scheduled]; r.Buttons != "Run now,Cancel" {
		t.Errorf("scheduled task's buttons %q", r.Buttons)
	}
	run("running a scheduled task now",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`#rows tr[data-id=%q] button[data-action="run-now"]`, v.scheduled))),
		poll[chromedp.Void](fmt.Sprintf(`!document.querySelector('#rows tr[data-id=%q]')`, v.scheduled)))
	s.waitFor(v.scheduled, "completed after Run now", completed)

	// The retrying task says when, and offers to retry now.
	run("opening the retrying tasks",
		chromedp.Click(chromedp.CSS(`#state-tabs a[data-state="retrying"]`)),
		poll[chromedp.Void](fmt.Sprintf(`!!document.querySelector('#rows tr[data-id=%q]')`, v.retrying)))
	if r := rows()[v.retrying]; r.Buttons != "Retry now,Cancel" || !strings.HasPrefix(r.Final, "retry at ") || r.Category != catIO {
		t.Errorf("retrying task: %+v", r)
	}

	// Jump to an ID: one that is not there, then the completed task.
	jump := func(id string) {
		t.Helper()
		run("jumping to "+id,
			chromedp.Evaluate[chromedp.Void](`document.querySelector('#jump-id').value = ''`),
			chromedp.SendKeys(chromedp.CSS("#jump-id"), id),
			chromedp.Click(chromedp.CSS(`#jump-form button[type="submit"]`)))
	}
	jump("7ZZZZZZZZZZZZZZZZZZZZZZZZZ")
	run("an unknown ID", poll[chromedp.Void](`document.querySelector('#detail-error').textContent === 'There is no task 7ZZZZZZZZZZZZZZZZZZZZZZZZZ.'`))
	show("#/tasks", "tasks", `!!document.querySelector('#rows tr')`)
	jump(v.completed)
	run("the completed task", poll[chromedp.Void](fmt.Sprintf(`document.querySelector('#detail').dataset.id === %q`, v.completed)))
	f = fields()
	if f["Rows"] != "4 / 4 rows, 2 ok, 2 bad" || !strings.Contains(f["Output"], v.completed) || f["Final"] != "" {
		t.Errorf("detail of the completed task: %v", f)
	}
	var download bool
	evaluate(`!!document.querySelector('#detail a.download')`, &download)
	if !download {
		t.Error("the completed task's detail has no Download link")
	}

	// The workers: this service's, live, and a dead one's leftover with
	// the task it held, which links to that task.
	workerRows := `document.querySelectorAll('#worker-rows tr').length === 2`
	run("opening the workers", chromedp.Click(chromedp.CSS(`#nav a[data-view="workers"]`)), poll[chromedp.Void](workerRows))
	// Until: a live worker's row says until when it stays live if it
	// stops reporting; a worker not live has no such time.
	type workerRow struct{ ID, Live, Until, Busy, Types, Running string }
	var workers []workerRow
	evaluate(`[...document.querySelectorAll('#worker-rows tr')].map(tr => ({
		ID: tr.dataset.id, Live: tr.querySelector('.status').textContent,
		Until: tr.querySelector('.live-until') ? (/^until .+ unless it reports$/.test(tr.querySelector('.live-until').textContent) ? 'stated' : tr.querySelector('.live-until').textContent) : '',
		Busy: tr.querySelector('.busy').textContent,
		Types: tr.children[3].textContent, Running: tr.querySelector('.running-cell').textContent,
	}))`, &workers)
	wantWorkers := []workerRow{
		{s.app.worker.ID(), "live", "stated", "0 of " + strconv.Itoa(s.app.cfg.concurrency), "csv_enrich, csv_stats, task_summary", "nothing"},
		{"worker-gone", "not live", "", "1 of 4", "every type", v.stuck},
	}
	slices.SortFunc(wantWorkers, func(a, b workerRow) int { return strings.Compare(a.ID, b.ID) })
	if diff := cmp.Diff(wantWorkers, workers); diff != "" {
		t.Errorf("workers (-want +got):\n%s", diff)
	}
	screenshot("operator-workers.png")
	run("opening the task a dead worker held",
		chromedp.Click(chromedp.CSS(`#worker-rows tr[data-id="worker-gone"] .running-cell a`)),
		poll[chromedp.Void](fmt.Sprintf(`document.querySelector('#detail').dataset.id === %q`, v.stuck)))
	f = fields()
	if f["Worker"] != "worker-gone" || !strings.Contains(f["Last report"], "overdue, the worker may have died") || !strings.Contains(f["Taken over at"], "if its worker stays silent") {
		t.Errorf("detail of the task of a dead worker: %v", f)
	}

	// The periodic tasks: the summary, its schedule, no run yet.
	periodicRows := `document.querySelectorAll('#periodic-rows tr').length === 1`
	run("opening the periodic tasks", chromedp.Click(chromedp.CSS(`#nav a[data-view="periodic"]`)), poll[chromedp.Void](periodicRows))
	var periodic struct{ Name, Run, Schedule, Latest, Task string }
	evaluate(`(() => { const tr = document.querySelector('#periodic-rows tr'); return {
		Name: tr.dataset.name, Run: tr.dataset.run, Schedule: tr.children[1].textContent,
		Latest: tr.children[3].textContent, Task: tr.children[4].textContent,
	}; })()`, &periodic)
	wantPeriodic := struct{ Name, Run, Schedule, Latest, Task string }{
		summaryName, "none", "daily at " + summaryAt + " UTCmissed runs: skip", "none yet", "—",
	}
	if diff := cmp.Diff(wantPeriodic, periodic); diff != "" {
		t.Errorf("the periodic tasks (-want +got):\n%s", diff)
	}

	// A phone, 390 px wide: every view fits, its content in view.
	run("a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulatePortrait))
	fits := func(view string) {
		t.Helper()
		var got struct {
			ScrollWidth int
			Wide        []string
		}
		evaluate(`(() => {
			const w = document.documentElement.clientWidth;
			const wide = [...document.querySelectorAll('body *')].filter(e => {
				const r = e.getBoundingClientRect();
				return r.width > 0 && (r.right > w + 0.5 || r.left < -0.5);
			}).map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className && e.className.baseVal === undefined ? '.' + e.className : ''));
			return { ScrollWidth: document.documentElement.scrollWidth, Wide: wide.slice(0, 10) };
		})()`, &got)
		if got.ScrollWidth > 390 || len(got.Wide) > 0 {
			t.Errorf("%s at 390 px: page %d px wide; elements past the screen: %v", view, got.ScrollWidth, got.Wide)
		}
	}
	// inView checks that every element selector matches is shown and
	// within the screen's width.
	inView := func(view, selector string, least int) {
		t.Helper()
		var n int
		evaluate(fmt.Sprintf(`(() => {
			const all = [...document.querySelectorAll(%q)];
			const shown = all.filter(e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= 390; });
			return shown.length === all.length ? all.length : -all.length;
		})()`, selector), &n)
		if n < least {
			t.Errorf("%s at 390 px: %s: %d shown in full, want every one and at least %d", view, selector, n, least)
		}
	}

	show("#/", "overview", `document.querySelectorAll('#chart-failed rect.bar').length === 24 && !!document.querySelector('#oldest a')`)
	checkOverview("4", "0", false, map[string]string{catBadInput: "2", catIO: "3"})
	fits("the overview")
	inView("the overview", "#state-counts a, #chart-completed svg, #chart-failed svg, #type-rows td", 7)
	screenshot("operator-overview-phone.png")

	show("#/tasks?status=dead", "tasks", `document.querySelectorAll('#rows tr.task').length === 4`)
	fits("the dead tasks")
	inView("the dead tasks", "#rows tr.task .status-cell .status, #rows tr.task .category, #rows tr.task td.actions button, #rows tr.task .name-cell a", 12)
	screenshot("operator-failed-phone.png")

	// The bulk bar, and a purge's confirmation, fit the phone's screen;
	// going back purges nothing.
	inView("the bulk bar", "#bulk-bar label, #bulk-bar button:not([hidden]), #rows tr.task .row-select", 8)
	run("ticking every dead task on the page",
		chromedp.Click(chromedp.CSS("#select-page")),
		poll[chromedp.Void](`document.querySelector('#bulk-count').textContent === '4 selected'`),
		chromedp.Click(chromedp.CSS("#bulk-purge")), phase("confirm"))
	if got := dialogState(); got.Summary != "4 tasks would be deleted for good." || got.Confirm != "Delete 4 tasks for good" {
		t.Errorf("the confirmation of a purge: %+v", got)
	}
	fits("a purge's confirmation")
	inView("a purge's confirmation", "#bulk-dialog, #bulk-title, #bulk-warning, #bulk-results li, #bulk-confirm, #bulk-close", 8)
	var onScreen bool
	evaluate(`(() => { const r = document.querySelector('#bulk-dialog').getBoundingClientRect(); return r.top >= 0 && r.bottom <= window.innerHeight; })()`, &onScreen)
	if !onScreen {
		t.Error("a purge's confirmation at 390 px: the dialog is taller than the screen")
	}
	run("going back", chromedp.Click(chromedp.CSS("#bulk-close")), poll[chromedp.Void](`!document.querySelector('#bulk-dialog').open`))
	show("#/tasks?status=dead", "tasks", `document.querySelectorAll('#rows tr.task').length === 4`)

	show("#/tasks/"+v.badInput, "task", fmt.Sprintf(`document.querySelector('#detail').dataset.id === %q`, v.badInput))
	fits("a task")
	inView("a task", "#detail dt, #detail dd, #detail .detail-actions button", 20)

	show("#/workers", "workers", workerRows)
	fits("the workers")
	inView("the workers", "#worker-rows .status, #worker-rows .running-cell a", 3)

	show("#/periodic", "periodic", periodicRows)
	fits("the periodic tasks")
	inView("the periodic tasks", "#periodic-rows td", 5)

	show("#/tasks", "tasks", `!!document.querySelector('#rows tr.task')`)
	fits("all tasks")
	inView("all tasks", "#create-button, #rows tr.task .status-cell .status, #rows tr.task progress, #rows tr.task td.actions > *", 10)
}

// picture is the start of a PNG file: not CSV.
const picture = "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00"

// operatorViews names the tasks seedOperatorViews made.
type operatorViews struct {
	completed, badInput, ioDead, scheduled, retrying, stuck string
	deadEnrich                                              [3]string    // dead csv_enrich tasks whose input is fine
	historyAt                                               [2]time.Time // times tasks were completed at, hours ago
}

// seedOperatorViews fills the service with a task in each state the
// views show, with a worker's help where it is quick (completed, failed
// on bad input) and by writing records where it is not: a dead task
// whose input is fine (Retry runs it), three more of type csv_enrich for
// the bulk actions, a scheduled one, one waiting for a retry, one whose
// worker went silent and left its presence object, and a day's history of
// finished tasks for the charts.
func seedOperatorViews(t *testing.T, s *service) operatorViews {
	t.Helper()
	var v operatorViews
	now := time.Now()
	history := []struct {
		hoursAgo int
		failed   string // the category of a final failure; "" for a completion
	}{{9, ""}, {7, ""}, {7, catIO}, {5, ""}, {5, ""}, {5, ""}, {3, ""}, {3, catBadInput}, {2, ""}, {1, ""}, {1, ""}, {1, catIO}}
	v.historyAt = [2]time.Time{now.Add(-5 * time.Hour), now.Add(-time.Hour)}
	for i, h := range history {
		id := s.create(fmt.Sprintf("hourly export %02d", i+1), typeStats, nil).Task.ID
		at := now.Add(-time.Duration(h.hoursAgo) * time.Hour)
		s.editRecord(id, func(rec map[string]any) {
			rec["created_at"], rec["submitted_at"], rec["started_at"] = rfc3339(at.Add(-time.Minute)), rfc3339(at.Add(-time.Minute)), rfc3339(at.Add(-30*time.Second))
			rec["updated_at"], rec["attempt_id"], rec["worker_id"], rec["input_size"] = rfc3339(at), 1, "worker-7", 2048
			rec["status"], rec["output_object_path"] = "completed", s.app.store.Prefix()+id+"/output-1.csv"
			if h.failed != "" {
				rec["status"], rec["error_category"], rec["last_error"] = "failed", h.failed, "attempt 1: "+h.failed+" trouble"
				delete(rec, "output_object_path")
			}
		})
	}

	v.completed = s.submit("June import", typeEnrich, map[string]any{"required": []string{"name", "email"}}, []byte(peopleCSV))
	v.badInput = s.submit("a picture", typeEnrich, nil, []byte(picture))
	s.waitFor(v.completed, "completed", completed)
	s.waitFor(v.badInput, "failed for good", failedForGood)
	for _, id := range []string{v.completed, v.badInput} {
		// As if they finished two minutes ago: past the minute Purge
		// leaves a task after its last change.
		s.editRecord(id, func(rec map[string]any) { rec["updated_at"] = rfc3339(time.Now().Add(-2 * time.Minute)) })
	}

	// Tasks created with their input but not submitted: no worker looks
	// at them until the test says.
	uploaded := func(name string) string {
		c := s.create(name, typeStats, nil)
		s.uploadPut(c.Upload.Put, []byte(peopleCSV))
		return c.Task.ID
	}
	v.ioDead = uploaded("July import")
	s.failRecord(v.ioDead, catIO, "attempt 3: storing the output: 503 SlowDown", time.Time{})
	for i, name := range []string{"September import", "October import", "November import"} {
		c := s.create(name, typeEnrich, map[string]any{"required": []string{"name", "email"}})
		s.uploadPut(c.Upload.Put, []byte(peopleCSV))
		v.deadEnrich[i] = c.Task.ID
		s.failRecord(c.Task.ID, catIO, "attempt 3: reading the input: connection reset", time.Time{})
	}
	v.retrying = uploaded("August import")
	s.failRecord(v.retrying, catIO, "attempt 1: reading the input: connection reset", time.Now().Add(time.Hour))

	// Scheduled an hour ahead before its submit, so that no worker starts
	// it in between.
	v.scheduled = uploaded("nightly totals")
	s.call("POST", "/tasks/"+v.scheduled+"/schedule", map[string]any{"run_at": time.Now().Add(time.Hour)}, http.StatusOK, nil)
	s.call("POST", "/tasks/"+v.scheduled+"/submit", nil, http.StatusOK, nil)

	s.create("waiting for its file", typeStats, nil)

	// Claimed by a worker that heartbeats every minute and has been silent
	// for 3, and whose presence object was last written then. Its lease
	// runs for an hour, longer than the test, so no worker takes it over.
	v.stuck = s.create("worker went silent", typeStats, nil).Task.ID
	silentSince := time.Now().Add(-3 * time.Minute)
	s.editRecord(v.stuck, func(rec map[string]any) {
		rec["status"], rec["attempt_id"], rec["worker_id"] = "running", 1, "worker-gone"
		rec["started_at"], rec["updated_at"], rec["lease_expires_at"] = rfc3339(silentSince), rfc3339(silentSince), rfc3339(silentSince.Add(time.Hour))
		rec["attempt_history"] = []any{map[string]any{"attempt": 1, "worker_id": "worker-gone", "started_at": rfc3339(silentSince), "outcome": "running", "heartbeat_interval_ms": 60000}}
	})
	presence := fmt.Sprintf(`{"kind":"s3task-worker","schema_version":1,"worker_id":"worker-gone","host":"batch-2","concurrency":4,`+
		`"types":null,"library_version":"v0.9.0","started_at":%q,"last_poll_at":%q,"running":[%q],`+
		`"presence_interval_ms":1,"clock_margin_ms":0,"written_at":%q}`,
		rfc3339(silentSince.Add(-time.Hour)), rfc3339(silentSince), v.stuck, rfc3339(silentSince))
	if _, err := s.objects().Put(t.Context(), s.app.store.Prefix()+"_workers/worker-gone.json", []byte(presence)); err != nil {
		t.Fatal(err)
	}
	s.waitWorkers("both workers listed", func(l taskview.Workers) bool { return len(l.Workers) == 2 && l.Live == 1 })
	return v
}
