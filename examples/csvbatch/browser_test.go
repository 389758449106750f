package main

import (
	"context"
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
)

// chromiumPath is where Debian's chromium package installs the browser.
const chromiumPath = "/usr/bin/chromium"

// TestBrowser drives the operator page in headless Chromium: sign in with
// the token, create a task and upload its CSV through the page (the
// presigned POST form goes straight to S3), watch it complete, and find the
// download link. It saves a screenshot under t.TempDir() and, if
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
	pending := s.create("waiting for its file", typeStats, nil) // shows a Cancel button, no Retry

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
	err := chromedp.Do(ctx,
		chromedp.Navigate(s.base+"/"),
		// The API answers 401 without a token, so the page asks for one.
		chromedp.WaitVisible(chromedp.CSS("#token")),
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
		Status, Progress, Buttons string
		Download                  bool
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]row](`[...document.querySelectorAll('#rows tr.task')].map(tr => ({
		Status: tr.dataset.status,
		Progress: tr.querySelector('.progress-cell').textContent,
		Buttons: [...tr.querySelectorAll('button')].map(b => b.textContent).join(','),
		Download: tr.querySelector('a.download') !== null,
	}))`))
	if err != nil {
		t.Fatal(err)
	}
	want := []row{
		{Status: "completed", Progress: "4 / 4 rows, 2 ok, 2 bad", Download: true},
		{Status: "created", Buttons: "Cancel"},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("task rows on the page (-want +got):\n%s", diff)
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
