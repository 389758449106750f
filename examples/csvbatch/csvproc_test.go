package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

// TestTaskArgs: the API decodes a payload strictly into its type's
// arguments, and Store.Create refuses arguments that do not validate.
func TestTaskArgs(t *testing.T) {
	t.Parallel()
	store := s3tasktest.NewStore(t, nil)
	tests := []struct {
		taskType, payload string
		ok                bool
	}{
		{typeEnrich, ``, true},
		{typeEnrich, `null`, true},
		{typeEnrich, `{}`, true},
		{typeEnrich, `{"required":["a","b"],"email_column":"mail"}`, true},
		{typeEnrich, `{"required":[""]}`, false},
		{typeEnrich, `{"required":"a"}`, false},
		{typeEnrich, `{"other":1}`, false},
		{typeEnrich, `{} {}`, false},
		{typeStats, `{}`, true},
		{typeStats, `{"x":1}`, false},
	}
	for _, tc := range tests {
		tt, ok := lookupType(tc.taskType)
		if !ok {
			t.Fatalf("no task type %q", tc.taskType)
		}
		args, err := taskArgs(tt, []byte(tc.payload))
		if err == nil {
			_, err = store.Create(t.Context(), s3task.CreateParams{Type: tc.taskType, Args: args})
		}
		if (err == nil) != tc.ok {
			t.Errorf("%s payload %s: %v, want ok %v", tc.taskType, tc.payload, err, tc.ok)
		}
	}
	for _, name := range []string{"csv_other", ""} {
		if _, ok := lookupType(name); ok {
			t.Errorf("lookupType(%q) found a type", name)
		}
	}
}

// TestHandlers runs the worker's handlers in process: what they write, the
// failure category they record, and what the worker leaves to others.
func TestHandlers(t *testing.T) {
	t.Parallel()
	store := s3tasktest.NewStore(t, nil)
	mux, err := newMux(store)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		params   s3task.CreateParams
		input    string
		category string // "" for a task that completes with output
		output   string
	}{
		{name: "enrich", params: s3task.CreateParams{Type: typeEnrich, Args: enrichArgs{Required: []string{"name"}}},
			input: "name,email\nAda,ADA@x.org\n,b@y.org\n", output: "name,email,row_status\nAda,ada@x.org,ok\n,b@y.org,error: missing name\n"},
		{name: "stats", params: s3task.CreateParams{Type: typeStats}, input: "n\n1\n3\n",
			output: "column,non_empty,empty,distinct,numeric,min,max,mean\nn,2,0,2,2,1,3,2\n"},
		{name: "not CSV", params: s3task.CreateParams{Type: typeEnrich}, input: "a,b\n1\n", category: catBadInput},
		{name: "binary", params: s3task.CreateParams{Type: typeStats}, input: "a,b\n\x00\x01,2\n", category: catBadInput},
		{name: "missing column", params: s3task.CreateParams{Type: typeEnrich, Args: enrichArgs{Required: []string{"id"}}}, input: "a\n1\n", category: catBadInput},
		// Written past the API's checks, as an older producer might.
		{name: "payload of another shape", params: s3task.CreateParams{Type: typeEnrich, Payload: []byte(`{"required":"id"}`)}, input: "id\n1\n", category: s3task.CategoryBadPayload},
		{name: "invalid payload", params: s3task.CreateParams{Type: typeEnrich, Payload: []byte(`{"required":[" "]}`)}, input: "id\n1\n", category: s3task.CategoryBadPayload},
	} {
		task := s3tasktest.Submit(t, store, tc.params, []byte(tc.input))
		res := s3tasktest.Run(t, store, mux, task.ID)
		got := res.Task
		switch {
		case tc.category == "" && (res.Err != nil || string(res.Output) != tc.output):
			t.Errorf("%s: error %v, output %q; want %q", tc.name, res.Err, res.Output, tc.output)
		case tc.category != "" && (got.Status != s3task.StatusFailed || !got.Terminal() || got.ErrorCategory != tc.category):
			t.Errorf("%s: %s (terminal %t) with category %q, last_error %q; want failed for good with %q",
				tc.name, got.Status, got.Terminal(), got.ErrorCategory, got.LastError, tc.category)
		}
	}

	// A type the worker does not serve stays queued for one that does.
	other := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "pdf_render"}, []byte("%PDF"))
	if ran := s3tasktest.Drain(t, store, mux); len(ran) != 0 {
		t.Errorf("the worker ran %d tasks; want none", len(ran))
	}
	if got, err := store.Get(t.Context(), other.ID); err != nil || got.Status != s3task.StatusQueued {
		t.Errorf("task of an unserved type: %v, %v; want it queued", got, err)
	}
}

func TestEnrich(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		in    string
		opts  enrichArgs
		want  string
		count s3task.Progress
	}{
		{
			name:  "trim, lower-case e-mail, required",
			in:    "name , Email\n  Ann , ANN@X.ORG \n,b@y.org\nCid,\n",
			opts:  enrichArgs{Required: []string{"name"}, EmailColumn: "Email"},
			want:  "name,Email,row_status\nAnn,ann@x.org,ok\n,b@y.org,error: missing name\nCid,,ok\n",
			count: s3task.Progress{RowCount: 3, ProcessedCount: 3, SuccessCount: 2, ErrorCount: 1},
		},
		{
			name:  "several problems in one row",
			in:    "email,name\nnot-an-address,\n",
			opts:  enrichArgs{Required: []string{"email", "name"}},
			want:  "email,name,row_status\nnot-an-address,,error: invalid email; missing name\n",
			count: s3task.Progress{RowCount: 1, ProcessedCount: 1, ErrorCount: 1},
		},
		{
			name:  "byte order mark, quoting and CRLF",
			in:    "\ufeffemail,note\r\n\"a@b.co\",\"line one\nline two\"\r\n",
			want:  "email,note,row_status\na@b.co,\"line one\nline two\",ok\n",
			count: s3task.Progress{RowCount: 1, ProcessedCount: 1, SuccessCount: 1},
		},
		{
			name: "header only",
			in:   "email\n",
			want: "email,row_status\n",
		},
		{
			name:  "no e-mail column",
			in:    "a,b\n1,2\n",
			want:  "a,b,row_status\n1,2,ok\n",
			count: s3task.Progress{RowCount: 1, ProcessedCount: 1, SuccessCount: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			p, err := enrich(t.Context(), strings.NewReader(tc.in), &out, int64(len(tc.in)), tc.opts, func(s3task.Progress) {})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.count, p); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlausibleEmail(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"a@b.co": true, "first.last+tag@sub.example.org": true,
		"": false, "a": false, "@b.co": false, "a@b": false, "a@@b.co": false, "a@b@c.co": false,
		"a b@c.co": false, "a@.b.co": false, "a@b.co.": false, "a@b..co": false, "<a@b.co>": false,
	} {
		if got := plausibleEmail(s); got != want {
			t.Errorf("plausibleEmail(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestBadInputIsPermanent: input that can never be processed fails for
// good, with a message an operator understands.
func TestBadInputIsPermanent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		opts     enrichArgs
		want     string
	}{
		{"binary", "name\nabc\x00def\n", enrichArgs{}, "binary file, not CSV (byte 8)"},
		{"binary header", "\x89PNG\x00\x00", enrichArgs{}, "binary file"},
		{"fewer fields", "a,b,c\n1,2,3\n4,5\n", enrichArgs{}, "line 3 has 2 fields, the header has 3"},
		{"more fields", "a,b\n1,2\n3,4\n5,6,7\n", enrichArgs{}, "line 4 has 3 fields, the header has 2"},
		{"bare quote", "a,b\n1,x\"y\n", enrichArgs{}, "not valid CSV"},
		{"unterminated quote", "a,b\n1,\"open\n", enrichArgs{}, "not valid CSV"},
		{"not UTF-8", "a,b\n1,caf\xe9\n", enrichArgs{}, "not UTF-8 text (line 2)"},
		{"empty", "", enrichArgs{}, "input is empty"},
		{"missing required column", "name,mail\nx,y\n", enrichArgs{Required: []string{"name", "email"}}, `no required column "email"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := enrich(t.Context(), strings.NewReader(tc.in), io.Discard, int64(len(tc.in)), tc.opts, func(s3task.Progress) {})
			if !s3task.IsPermanent(err) || !strings.Contains(fmt.Sprint(err), tc.want) {
				t.Errorf("enrich: %v (permanent %v), want a permanent error containing %q", err, s3task.IsPermanent(err), tc.want)
			}
			_, err = stats(t.Context(), strings.NewReader(tc.in), io.Discard, int64(len(tc.in)), statsArgs{}, func(s3task.Progress) {})
			if tc.opts.Required == nil && !s3task.IsPermanent(err) {
				t.Errorf("stats: %v, want a permanent error", err)
			}
		})
	}
}

// TestReadErrorIsTransient: when reading the input fails (the S3 stream
// broke), the error is returned as it is, so the worker retries.
func TestReadErrorIsTransient(t *testing.T) {
	t.Parallel()
	broken := errors.New("connection reset by peer")
	in := io.MultiReader(strings.NewReader("a,b\n1,2\n3,4\n"), iotest.ErrReader(broken))
	_, err := enrich(t.Context(), in, io.Discard, 1000, enrichArgs{}, func(s3task.Progress) {})
	if !errors.Is(err, broken) || s3task.IsPermanent(err) {
		t.Errorf("enrich: %v, want the read error, not permanent", err)
	}
	in = io.MultiReader(strings.NewReader("a,b\n1,2\n"), iotest.ErrReader(broken))
	if _, err := stats(t.Context(), in, io.Discard, 1000, statsArgs{}, func(s3task.Progress) {}); !errors.Is(err, broken) || s3task.IsPermanent(err) {
		t.Errorf("stats: %v, want the read error, not permanent", err)
	}
}

// TestProgressMoves: a large input reports progress while it runs, with an
// estimated row count, and exact counts at the end.
func TestProgressMoves(t *testing.T) {
	t.Parallel()
	var in bytes.Buffer
	const rows = 20 * progressEvery
	counts, err := generateCSV(&in, rows)
	if err != nil {
		t.Fatal(err)
	}
	var reports []s3task.Progress
	size := int64(in.Len())
	p, err := enrich(t.Context(), &in, io.Discard, size, enrichArgs{Required: []string{"name", "email"}}, func(p s3task.Progress) {
		reports = append(reports, p)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := s3task.Progress{RowCount: rows, ProcessedCount: rows, SuccessCount: counts.ok, ErrorCount: rows - counts.ok}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("final counts (-want +got):\n%s", diff)
	}
	if len(reports) < 10 {
		t.Fatalf("%d progress reports for %d rows", len(reports), rows)
	}
	mid := reports[len(reports)/2]
	if mid.ProcessedCount <= 0 || mid.ProcessedCount >= rows || mid.RowCount < rows*8/10 || mid.RowCount > rows*12/10 {
		t.Errorf("a report half-way: %+v; want some rows done and an estimate near %d", mid, rows)
	}
	for i := 1; i < len(reports); i++ {
		if reports[i].ProcessedCount < reports[i-1].ProcessedCount {
			t.Fatalf("progress went backwards: %+v then %+v", reports[i-1], reports[i])
		}
	}
	if diff := cmp.Diff(want, reports[len(reports)-1]); diff != "" {
		t.Errorf("last report (-want +got):\n%s", diff)
	}
}

// TestCancellation: processing stops with the context's cause.
func TestCancellation(t *testing.T) {
	t.Parallel()
	var in bytes.Buffer
	if _, err := generateCSV(&in, 10*progressEvery); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(s3task.ErrTaskCanceled)
	_, err := enrich(ctx, &in, io.Discard, 0, enrichArgs{}, func(s3task.Progress) {})
	if !errors.Is(err, s3task.ErrTaskCanceled) {
		t.Errorf("enrich: %v, want ErrTaskCanceled", err)
	}
}

func TestStatsDistinctIsCapped(t *testing.T) {
	t.Parallel()
	var in strings.Builder
	in.WriteString("n,same\n")
	for i := range maxDistinct + 5 {
		fmt.Fprintf(&in, "%d,x\n", i)
	}
	var out bytes.Buffer
	if _, err := stats(t.Context(), strings.NewReader(in.String()), &out, 0, statsArgs{}, func(s3task.Progress) {}); err != nil {
		t.Fatal(err)
	}
	want := "column,non_empty,empty,distinct,numeric,min,max,mean\n" +
		"n,1005,0,1000+,1005,0,1004,502\nsame,1005,0,1,0,,,\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}
