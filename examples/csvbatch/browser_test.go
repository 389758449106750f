package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
)

// chromiumPath is where Debian's chromium package installs the browser.
const chromiumPath = "/usr/bin/chromium"

// TestBrowser drives the operator page in headless Chromium: sign in with
// the token, create a task and upload its CSV through the page (the
// presigned POST form goes straight to S3), watch it complete, and find the
// download link. A running task whose worker went silent shows the overdue
// report flag; a task created without its file gets it through the row's
// "Upload file" button, which asks for a fresh upload link. It saves a screenshot under t.TempDir() and, if
// CSVBATCH_SCREENSHOT names a file, a copy there.
//
// It is skipped when Chromium is missing, except under CI=true, where it
// fails instead.
func TestBrowser(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %s is missing (apt-get install -y chromium): %v", chromiumPath, err)
		}
		t.Skipf("%s not found; install chromium to run the browser test", chromiumPath)
	}

	s := startService(t, svcOptions{})
	pending := s.create("waiting for its file", typeStats, nil) // shows Upload file and Cancel, no Retry
	stuck := s.create("worker went silent", typeStats, nil)
	// Make it a task whose worker claimed it and has been silent for 3 of
	// its 5 minutes of lease: more than half, so a heartbeat is late.
	silentSince := time.Now().UTC().Add(-3 * time.Minute).Truncate(time.Millisecond)
	rec := *stuck.Task.Task
	rec.Status, rec.Attempt, rec.WorkerID = s3task.StatusRunning, 1, "worker-gone"
	rec.UpdatedAt, rec.LeaseExpiresAt = silentSince, silentSince.Add(5*time.Minute)
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

	var logMu sync.Mutex
	logging := true
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		if logging {
			t.Logf("chromium: "+format, args...)
		}
	}
	defer func() {
		logMu.Lock()
		logging = false
		logMu.Unlock()
	}()

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(filepath.Join(dir, "profile")),
		chromedp.WindowSize(1280, 860),
	)
	defer cancelAlloc() // waits for the browser to exit
	browserCtx, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithErrorf(logf))
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(browserCtx, 45*time.Second)
	defer cancel()

	completedLink := `#rows tr[data-status="completed"] a.download`
	// The API answers 401 without a token, so the page asks for one, in
	// words for people; a wrong token gets words of its own.
	loginMessage := func() (string, error) {
		return chromedp.Run(ctx, chromedp.Poll[string](`(() => {
			const m = document.querySelector('#login-error');
			return !document.querySelector('#login').hidden && m.textContent !== '' && m.textContent;
		})()`))
	}
	first, err := func() (string, error) {
		if err := chromedp.Do(ctx, chromedp.Navigate(s.base+"/"), chromedp.WaitVisible(chromedp.CSS("#token"))); err != nil {
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
		chromedp.Poll[chromedp.Void](`document.querySelector('#login-error').textContent.includes('not accepted')`),
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
	recovers, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(
		`new Date(%q).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })`,
		rec.LeaseExpiresAt.Add(s3task.DefaultClockMargin).Format(time.RFC3339Nano))))
	if err != nil {
		t.Fatal(err)
	}
	want := []row{
		{Status: "completed", Progress: "4 / 4 rows, 2 ok, 2 bad", Download: true},
		{Status: "running", Progress: "0 / ? rows, 0 ok, 0 bad", Buttons: "Cancel",
			Overdue: "no report for 3 m; recovered at " + recovers + " if it stays silent"},
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
