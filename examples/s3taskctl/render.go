package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/aws/smithy-go"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/taskview"
)

// listDoc is what list -json prints.
type listDoc struct {
	Tasks        []taskview.Task   `json:"tasks"`
	Broken       []taskview.Broken `json:"broken"`
	NextCursor   string            `json:"next_cursor,omitempty"`
	Read         int               `json:"read"` // readable tasks in the page, before -status
	StatusFilter []string          `json:"status_filter,omitempty"`
	Note         string            `json:"note,omitempty"`
}

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer) *table { return &table{tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)} }

func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }
func (t *table) flush()              { _ = t.tw.Flush() }

// clean makes text from a record safe for one table cell: control
// characters (tabs, newlines, escape sequences) become spaces, and it is
// cut to n runes.
func clean(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// statusText is the status with what it implies for a failed task.
func statusText(t *s3task.Task, now time.Time) string {
	switch {
	case t.Purging:
		return string(t.Status) + " (purging)"
	case t.Status == s3task.StatusFailed && t.RetryAt.IsZero():
		return "failed (final)"
	case t.Status == s3task.StatusFailed:
		if d := t.RetryAt.Sub(now); d > 0 {
			return "failed (retry in " + d.Round(time.Second).String() + ")"
		}
		return "failed (retry due)"
	case t.Scheduled(now):
		return "queued (scheduled in " + t.RunAt.Sub(now).Round(time.Second).String() + ")"
	case t.Status == s3task.StatusRunning:
		return "running" + silenceText(t, now)
	}
	return string(t.Status)
}

// silenceText is, for a running task whose worker's heartbeat is late
// (s3task.Task.Silent), how long it has been silent and when another
// worker takes the task over if it stays so (at the default clock
// margin); "" otherwise.
func silenceText(t *s3task.Task, now time.Time) string {
	silence, overdue := t.Silent(now)
	if !overdue {
		return ""
	}
	text := " (no report for " + shortDuration(silence)
	if at := t.RecoversAt(s3task.DefaultClockMargin); !at.IsZero() {
		if at.After(now) {
			text += "; recovered at " + at.UTC().Format("15:04:05Z") + " if it stays silent"
		} else {
			text += "; lease ran out at " + at.UTC().Format("15:04:05Z") + " and no worker has taken it over: a running worker of its type does at its next poll (see s3taskctl workers)"
		}
	}
	return text + ")"
}

// shortDuration formats d in whole seconds, minutes or hours and minutes:
// "45s", "3m", "2h5m".
func shortDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	}
	return fmt.Sprintf("%dh%dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
}

func attemptText(t *s3task.Task) string { return fmt.Sprintf("%d/%d", t.Attempt, t.MaxAttempts) }

func progressText(t *s3task.Task) string {
	switch {
	case t.RowCount > 0:
		return fmt.Sprintf("%d/%d", t.ProcessedCount, t.RowCount)
	case t.ProcessedCount > 0:
		return fmt.Sprintf("%d", t.ProcessedCount)
	}
	return "-"
}

// progressLine is watch's progress bar.
func progressLine(t *s3task.Task) string {
	const width = 30
	state := string(t.Status)
	if t.Attempt > 0 {
		state += fmt.Sprintf(", attempt %d of %d", t.Attempt, t.MaxAttempts)
	}
	if t.Status == s3task.StatusFailed && !t.RetryAt.IsZero() {
		state += ", retry at " + t.RetryAt.UTC().Format("15:04:05Z")
	}
	frac := -1.0
	switch {
	case t.Status == s3task.StatusCompleted:
		frac = 1
	case t.RowCount > 0:
		frac = min(float64(t.ProcessedCount)/float64(t.RowCount), 1)
	}
	if frac < 0 {
		return fmt.Sprintf("[%s]   ?%%  %d rows  %s", strings.Repeat(".", width), t.ProcessedCount, state)
	}
	filled := int(frac * width)
	return fmt.Sprintf("[%s%s] %3.0f%%  %d/%d rows  %s",
		strings.Repeat("#", filled), strings.Repeat(".", width-filled), frac*100, t.ProcessedCount, t.RowCount, state)
}

// stamp formats a time with how long ago (or ahead) it is.
func stamp(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	rel := span(d) + " ago"
	if d < 0 {
		rel = "in " + span(-d)
	}
	return t.UTC().Format("2006-01-02 15:04:05Z") + " (" + rel + ")"
}

// ago is the age of t, short, for tables.
func ago(t, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return span(d) + " ago"
	case d < 48*time.Hour:
		return span(d.Round(time.Minute)) + " ago"
	}
	return t.UTC().Format("2006-01-02")
}

// span formats d, rounded to the second, the way people write it: 45s,
// 4m, 4m12s, 3h, 3h5m (seconds left out from an hour on).
func span(d time.Duration) string {
	d = d.Round(time.Second)
	h, m, s := d/time.Hour, d%time.Hour/time.Minute, d%time.Minute/time.Second
	switch {
	case h > 0 && m > 0:
		return fmt.Sprintf("%dh%dm", h, m)
	case h > 0:
		return fmt.Sprintf("%dh", h)
	case m > 0 && s > 0:
		return fmt.Sprintf("%dm%ds", m, s)
	case m > 0:
		return fmt.Sprintf("%dm", m)
	}
	return fmt.Sprintf("%ds", s)
}

func byWhom(who string) string {
	if who == "" {
		return ""
	}
	return " by " + clean(who, 64)
}

// isTerminal reports whether w is a terminal, where watch redraws its bar
// in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// isNotFound reports whether an S3 error says the object is not there.
func isNotFound(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NotFound", "NoSuchKey":
			return true
		}
	}
	return false
}
